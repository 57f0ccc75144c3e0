import Codecs
import Foundation
public import OpenSSL

// Cross-checks against the openssl CLI that more than one module's tests use.
extension Shell {
    /// The SubjectPublicKeyInfo (DER) of a PEM private key, as the openssl CLI writes it.
    public static func publicKeyDER(pem: String) throws -> [UInt8] {
        Hex.decode(try Shell.run("printf '%s\\n' \"$1\" | openssl pkey -pubout -outform DER | od -An -v -tx1 | tr -d ' \\n'", [pem])) ?? []
    }

    /// Splits `plaintext` into 245-byte chunks (the most PKCS#1 v1.5 fits in a 2048-bit
    /// block), encrypts each with
    /// `openssl pkeyutl -pkeyopt rsa_padding_mode:pkcs1` under `key`'s public half, and
    /// returns the base64 of the concatenated ciphertexts (wrapped at 76 columns if asked).
    public static func sealWithCLI(_ plaintext: [UInt8], for key: RSAPrivateKey, wrapped: Bool = false) throws -> String {
        try withTemporaryDirectory { directory in
            try directory.appendingPathComponent("pub.pem").write(try key.publicKeyPEM)
            for (index, start) in stride(from: 0, to: plaintext.count, by: 245).enumerated() {
                let chunk = Array(plaintext[start..<min(start + 245, plaintext.count)])
                try directory.appendingPathComponent(String(format: "chunk%03d.bin", index)).write(chunk)
            }
            return try Shell.run("""
                cd "$1" || exit 1
                for f in chunk*.bin; do
                    openssl pkeyutl -encrypt -pubin -inkey pub.pem -pkeyopt rsa_padding_mode:pkcs1 -in "$f" -out "$f.enc" || exit 1
                done
                cat chunk*.bin.enc | base64 \(wrapped ? "" : "-w0")
                """, [directory.path])
        }
    }
}
