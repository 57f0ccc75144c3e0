import Crypto
import Foundation
import Testing
@testable import ENSKit

/// ENSKit's cryptography against independent implementations: Python's `cryptography`
/// (the vectors in Vectors/, made by make_vectors.py, and a live decryption of what
/// ENSKit seals) and docs/privacy.md's test vector.
struct CryptoTests {
    @Test func userIDIsTheDocumentedHash() {
        // docs/api.md, "Identity".
        #expect(ENSUser(email: "Someone@Example.com").userID == "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab")
        #expect(ENSUser(userID: "72497F475E4F76D0B28F57C73A084ECE576D170874EBA3EE2609D9AFE4B71AAB")?.userID
                == "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab")
        #expect(ENSUser(userID: "not-hex") == nil)
    }

    /// Sealed by ENSKit, opened by Python's `cryptography` (Tests/tools/seal.py's
    /// library) with PKCS#1 v1.5: one block, several blocks, the empty plaintext.
    @Test(.enabled(if: Python.hasCryptography, "needs python3 with cryptography"))
    func pythonOpensWhatENSKitSeals() throws {
        let key = try Vectors.json("server-key")["first"] as? [String: String]
        let privatePEM = try #require(key?["private"])
        let sealer = try ENSSealer(publicKeyPEM: try #require(key?["public"]))
        let plaintexts = ["", "{\"apnsToken\":\"ab\"}", String(repeating: "é", count: 300)]
        for plaintext in plaintexts {
            let sealed = try sealer.seal(Data(plaintext.utf8))
            #expect(Data(base64Encoded: sealed)?.count == max(1, (plaintext.utf8.count + 244) / 245) * 256)
            let opened = try Python.run("""
                import base64, sys
                from cryptography.hazmat.primitives.asymmetric import padding
                from cryptography.hazmat.primitives.serialization import load_pem_private_key
                key = load_pem_private_key(sys.argv[1].encode(), None)
                sealed = base64.b64decode(sys.argv[2])
                plain = b"".join(key.decrypt(sealed[i:i + 256], padding.PKCS1v15()) for i in range(0, len(sealed), 256))
                sys.stdout.write(plain.hex())
                """, privatePEM, sealed)
            #expect(opened == Hex.encode(Array(plaintext.utf8)))
        }
    }

    /// Envelopes sealed by ENSKit, opened by Python's `cryptography`: the key block with
    /// PKCS#1 v1.5, the plaintext with AES-256-GCM and the documented associated data.
    @Test(.enabled(if: Python.hasCryptography, "needs python3 with cryptography"))
    func pythonOpensTheEnvelopesENSKitSeals() throws {
        let key = try Vectors.json("server-key")["first"] as? [String: String]
        let privatePEM = try #require(key?["private"])
        let sealer = try ENSSealer(publicKeyPEM: try #require(key?["public"]), form: .envelope)
        for plaintext in ["", "{\"apnsToken\":\"ab\"}", String(repeating: "é", count: 490)] {
            let sealed = try sealer.seal(Data(plaintext.utf8))
            #expect(sealed.hasPrefix("e1:"))
            #expect(Data(base64Encoded: String(sealed.dropFirst(3)))?.count == 256 + 12 + plaintext.utf8.count + 16)
            let opened = try Python.run("""
                import base64, sys
                from cryptography.hazmat.primitives.asymmetric import padding
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
                from cryptography.hazmat.primitives.serialization import load_pem_private_key
                key = load_pem_private_key(sys.argv[1].encode(), None)
                sealed = base64.b64decode(sys.argv[2][len("e1:"):])
                content_key = key.decrypt(sealed[:256], padding.PKCS1v15())
                plain = AESGCM(content_key).decrypt(sealed[256:268], sealed[268:], b"ens-envelope/1")
                sys.stdout.write(plain.hex())
                """, privatePEM, sealed)
            #expect(opened == Hex.encode(Array(plaintext.utf8)))
        }
        // Two seals of one plaintext share nothing: a fresh key and nonce each time.
        #expect(try sealer.seal(Data("x".utf8)) != (try sealer.seal(Data("x".utf8))))
        #expect(throws: ENSError.self) { try sealer.seal(Data(count: 4 * 245 + 1)) }
        #expect(try sealer.seal(Data(count: 64 * 245), maximumBlocks: ENSSealer.maximumCredentialBlocks).hasPrefix("e1:"))
    }

    @Test func sealingRefusesWhatENSWouldRefuse() throws {
        let (pem, _) = try Vectors.serverKey()
        let sealer = try ENSSealer(publicKeyPEM: pem)
        #expect(throws: ENSError.self) { try sealer.seal(Data(count: 4 * 245 + 1)) }
        #expect(try sealer.seal(Data(count: 64 * 245), maximumBlocks: ENSSealer.maximumCredentialBlocks).count > 0)
        #expect(throws: ENSError.unusablePublicKey) { try ENSSealer(publicKeyPEM: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n") }
    }

    /// docs/privacy.md's test vector (made by Tests/tools/preview_encryption.py).
    @Test func previewVectorOpens() throws {
        let key = try ENSPreviewKey(
            rawRepresentation: Data(try #require(Hex.decode("2fe4420c5ca27e1aa01858c186639f5aca3e18535e13eb81fe1dc0f5f52aab88"))))
        #expect(Hex.encode(key.publicKeyX963) == "04e0d9ddbed3137b2df81909ac553086a8a637e1961303810c0860056be48e2848a0445c9fa7329d"
                + "145991ffba8b49e5f0eeec92787bbd57d99f1034c1c1216f69")
        let blob = Data(try #require(Hex.decode(Self.vectorBlob)))
        let plaintext = try PreviewDecryption.open(blob, id: "a4b5bee1dca2665f254fb64528934a16", with: key)
        #expect(String(decoding: plaintext, as: UTF8.self) == #"{"from":"Alice Example","subject":"Lunch on Friday?"}"#)

        // Another id, an altered byte, another key, another version: nothing opens.
        #expect(throws: PreviewDecryption.Failure.doesNotOpen) { try PreviewDecryption.open(blob, id: "a4b5bee1dca2665f254fb64528934a17", with: key) }
        var altered = blob
        altered[altered.count - 20] ^= 1
        #expect(throws: PreviewDecryption.Failure.doesNotOpen) { try PreviewDecryption.open(altered, id: "a4b5bee1dca2665f254fb64528934a16",
                                                                                            with: key) }
        #expect(throws: PreviewDecryption.Failure.doesNotOpen) { try PreviewDecryption.open(blob,
            id: "a4b5bee1dca2665f254fb64528934a16", with: ENSPreviewKey()) }
        var version2 = blob
        version2[0] = 2
        #expect(throws: PreviewDecryption.Failure.malformed) { try PreviewDecryption.open(version2, id: "a4b5bee1dca2665f254fb64528934a16",
                                                                                          with: key) }
        #expect(throws: PreviewDecryption.Failure.malformed) { try PreviewDecryption.open(blob.prefix(93),
                                                                                          id: "a4b5bee1dca2665f254fb64528934a16", with: key) }
    }

    /// Python's `cryptography` (Tests/tools/preview_encryption.py, ENS's independent
    /// implementation) seals content to a key ENSKit made; ENSKit opens it.
    @Test(.enabled(if: Python.hasCryptography, "needs python3 with cryptography"))
    func previewSealedByPythonOpens() throws {
        let key = ENSPreviewKey()
        let content = #"{"sender":"Ann Example","subject":"Lunch?","badge":3}"#
        let id = "0123456789abcdef0123456789abcdef"
        let output = try Python.runFile(Python.repositoryRoot + "/Tests/tools/preview_encryption.py",
                                        ["encrypt", Hex.encode(key.publicKeyX963), id, Hex.encode(Array(content.utf8))])
        let blobs = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String])
        let first = try #require(blobs.first)
        let blob = Data(try #require(Hex.decode(first)))
        #expect(String(decoding: try PreviewDecryption.open(blob, id: id, with: key), as: UTF8.self) == content)
    }

    /// Microsoft's encrypted resource data, made by Python's `cryptography`
    /// (Vectors/make_vectors.py): opens with the device's key; altered data and another
    /// device's key are refused before any decryption.
    @Test func blindVectorsOpen() throws {
        let vectors = try Vectors.json("blind")
        let key = try ENSBlindKey(pemRepresentation: try #require(vectors["device_private_key_pem"] as? String))
        func content(_ name: String) throws -> BlindContent {
            let object = try #require(vectors[name] as? [String: Any])
            return try #require(BlindContent.fromPush(PushValue(object)) ?? nil)
        }
        let good = try content("good")
        #expect(String(decoding: try good.open(with: key), as: UTF8.self) == vectors["resource"] as? String)
        let shown = try good.content(with: key)
        #expect(shown.sender == "Bea Finance")
        #expect(shown.subject == "Quarterly numbers — déjà vu")
        #expect(good.encryptionCertificateID.count == 32 && good.encryptionCertificateThumbprint.count == 40)
        #expect(throws: BlindContent.Failure.signatureMismatch) { try content("altered_data").open(with: key) }
        #expect(throws: BlindContent.Failure.keyDoesNotUnwrap) { try content("other_key").open(with: key) }
        var garbled = good
        garbled.dataKey = "not base64!"
        #expect(throws: BlindContent.Failure.malformed) { try garbled.open(with: key) }
    }

    static let vectorBlob = "0104c71d7b1356a74b052b6f6656ea7b715160c02b0f3e23c47645a7370c34b9cb937c2a4e280e034c4a4ad97e12c2796a0d501fc0d4a135"
        + "f4a08243e3c2cb6a292c5a467854a9376aee6f3749d0f1f2941d37a7cd054f641e4c904ee4d9ff41a1d75b230f16cbcb74ff09fe628930b5"
        + "bdcf888110f0e4d9b1212b360ddde9f34a07bcf82eb1fee6bab4df03bc1fbd76476051"
}

/// Python 3 with `cryptography`, the independent implementation the tests check against.
enum Python {
    static let hasCryptography: Bool = (try? run("import cryptography")) != nil

    /// The repository's root (clients/ENSKit is two levels below it).
    static var repositoryRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().path
    }

    static func run(_ code: String, _ arguments: String...) throws -> String {
        try execute(["python3", "-c", code] + arguments)
    }

    static func runFile(_ path: String, _ arguments: [String]) throws -> String {
        try execute(["python3", path] + arguments)
    }

    struct Failed: Error {}

    private static func execute(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw Failed() }
        return String(decoding: data, as: UTF8.self)
    }
}
