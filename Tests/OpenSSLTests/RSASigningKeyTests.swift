import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing

/// RS256 (RSASSA-PKCS1-v1_5 with SHA-256), cross-checked against the openssl CLI: the
/// CLI verifies our signatures, and since PKCS#1 v1.5 signing is deterministic, the
/// CLI's own signature of the same message under the same key is the same bytes.
@Suite struct RSASigningKeyTests {
    /// A key from the openssl CLI in both PEM forms, and its public key.
    struct CLIKey {
        let directory: URL
        var pkcs8: String { directory.appendingPathComponent("pkcs8.pem").path }
        var pkcs1: String { directory.appendingPathComponent("pkcs1.pem").path }
        var publicKey: String { directory.appendingPathComponent("pub.pem").path }

        init(in directory: URL, bits: Int = 2048) throws {
            self.directory = directory
            _ = try Shell.run("""
                openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:"$4" -out "$1" 2>/dev/null && \
                openssl rsa -in "$1" -traditional -out "$2" 2>/dev/null && \
                openssl pkey -in "$1" -pubout -out "$3"
                """, [directory.appendingPathComponent("pkcs8.pem").path, directory.appendingPathComponent("pkcs1.pem").path,
                      directory.appendingPathComponent("pub.pem").path, String(bits)])
        }

        func text(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }
    }

    static let verify = "openssl dgst -sha256 -verify \"$1\" -signature \"$2\" \"$3\" 2>/dev/null || echo REFUSED"

    @Test func readsBothPEMForms() throws {
        try withTemporaryDirectory { directory in
            let cli = try CLIKey(in: directory)
            #expect(try cli.text(cli.pkcs8).hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
            #expect(try cli.text(cli.pkcs1).hasPrefix("-----BEGIN RSA PRIVATE KEY-----\n"))
            for path in [cli.pkcs8, cli.pkcs1] {
                let key = try RSASigningKey(pem: try cli.text(path))
                #expect(key.bits == 2048, "\(path)")
                #expect(try key.publicKeyPEM == cli.text(cli.publicKey), "\(path)")
            }
            // Text around the block is tolerated, as in a file with comments or a JSON value unescaped.
            let padded = try RSASigningKey(pem: "service account key\n\n" + (try cli.text(cli.pkcs8)) + "\n")
            #expect(try padded.publicKeyPEM == cli.text(cli.publicKey))
        }
    }

    @Test func signaturesVerifyWithAndEqualTheOpenSSLCommand() throws {
        try withTemporaryDirectory { directory in
            let cli = try CLIKey(in: directory)
            let keys = [try RSASigningKey(pem: try cli.text(cli.pkcs8)), try RSASigningKey(pem: try cli.text(cli.pkcs1))]
            var generator = SeededGenerator(seed: 0x25256)
            var messages = [0, 1, 55, 56, 64, 100, 4096].map { generator.bytes($0) }
            // What a client assertion signs: base64url(header) "." base64url(claims).
            messages.append(Array("eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsIng1dCI6ImFiYyJ9.eyJhdWQiOiJodHRwczovL2xvZ2luIn0".utf8))
            for (index, message) in messages.enumerated() {
                let messageFile = directory.appendingPathComponent("m\(index)")
                let signatureFile = directory.appendingPathComponent("s\(index)")
                try messageFile.write(message)
                let cliSignature = try Shell.run("openssl dgst -sha256 -sign \"$1\" \"$2\" | od -An -v -tx1 | tr -d ' \\n'",
                                                 [cli.pkcs8, messageFile.path])
                for key in keys {
                    let signature = try key.signRS256(message)
                    #expect(signature.count == 256, "length \(message.count)")
                    #expect(Hex.encode(signature) == cliSignature, "length \(message.count)")
                    try signatureFile.write(signature)
                    #expect(try Shell.run(Self.verify, [cli.publicKey, signatureFile.path, messageFile.path]) == "Verified OK",
                            "length \(message.count)")
                }
                // The signature does not verify another message, and a changed signature fails.
                let signature = try keys[0].signRS256(message)
                try messageFile.write(message + [0])
                #expect(try Shell.run(Self.verify, [cli.publicKey, signatureFile.path, messageFile.path]).hasSuffix("REFUSED"))
                try messageFile.write(message)
                var flipped = signature
                flipped[flipped.count - 1] ^= 1
                try signatureFile.write(flipped)
                #expect(try Shell.run(Self.verify, [cli.publicKey, signatureFile.path, messageFile.path]).hasSuffix("REFUSED"))
            }
        }
    }

    @Test func signaturesAreDeterministicAndAsLongAsTheModulus() throws {
        try withTemporaryDirectory { directory in
            let cli = try CLIKey(in: directory, bits: 3072)
            let key = try RSASigningKey(pem: try cli.text(cli.pkcs1))
            #expect(key.bits == 3072)
            let message = Array("same".utf8)
            let signature = try key.signRS256(message)
            #expect(signature.count == 384)
            #expect(try key.signRS256(message) == signature)
            #expect(try key.signRS256(Array("other".utf8)) != signature)
            let messageFile = directory.appendingPathComponent("m")
            let signatureFile = directory.appendingPathComponent("s")
            try messageFile.write(message)
            try signatureFile.write(signature)
            #expect(try Shell.run(Self.verify, [cli.publicKey, signatureFile.path, messageFile.path]) == "Verified OK")
        }
    }

    @Test func refusesOtherKeyTypesClearly() throws {
        try withTemporaryDirectory { directory in
            var texts = [("ECSigningKey", try ECSigningKey.generate().pem)]
            for (name, options) in [("ec", "-algorithm EC -pkeyopt ec_paramgen_curve:P-256"),
                                    ("ed25519", "-algorithm ed25519"),
                                    ("rsa-pss", "-algorithm RSA-PSS -pkeyopt rsa_keygen_bits:2048")] {
                let path = directory.appendingPathComponent(name + ".pem").path
                _ = try Shell.run("openssl genpkey \(options) -out \"$1\" 2>/dev/null", [path])
                texts.append((name, try String(contentsOfFile: path, encoding: .utf8)))
            }
            // The traditional SEC 1 form of an EC key.
            let sec1 = directory.appendingPathComponent("sec1.pem").path
            _ = try Shell.run("openssl ec -in \"$1\" -out \"$2\" 2>/dev/null", [directory.appendingPathComponent("ec.pem").path, sec1])
            texts.append(("sec1", try String(contentsOfFile: sec1, encoding: .utf8)))
            for (name, text) in texts {
                do throws(OpenSSLError) {
                    _ = try RSASigningKey(pem: text)
                    Issue.record("accepted \(name)")
                } catch {
                    #expect(error.operation == "read RSA private key" && error.reasons == ["not an RSA key"], "\(name): \(error)")
                    #expect(error.description == "OpenSSL read RSA private key failed: not an RSA key", "\(name)")
                }
            }
        }
    }

    @Test func refusesKeysUnder2048Bits() throws {
        try withTemporaryDirectory { directory in
            let cli = try CLIKey(in: directory, bits: 1024)
            let text = try cli.text(cli.pkcs8)
            do throws(OpenSSLError) {
                _ = try RSASigningKey(pem: text)
                Issue.record("accepted a 1024-bit key")
            } catch {
                #expect(error.reasons == ["a 1024-bit key is shorter than 2048 bits"], "\(error)")
            }
        }
    }

    @Test func refusesGarbageWithAnError() throws {
        try withTemporaryDirectory { directory in
            let cli = try CLIKey(in: directory)
            let pem = try cli.text(cli.pkcs1)
            var lines = pem.split(separator: "\n").map(String.init)
            lines[3] = String(lines[3].reversed())
            let certificate = directory.appendingPathComponent("cert.pem").path
            _ = try Shell.run("openssl req -x509 -key \"$1\" -subj /CN=app -days 1 -out \"$2\" 2>/dev/null", [cli.pkcs8, certificate])
            let cases = [
                "", "garbage", String(repeating: "\u{0}", count: 10),
                "-----BEGIN RSA PRIVATE KEY-----\n-----END RSA PRIVATE KEY-----\n",
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                "-----BEGIN PRIVATE KEY-----\n" + String(repeating: "A", count: 100_000) + "\n-----END PRIVATE KEY-----\n",
                String(pem.prefix(pem.count / 2)),
                lines.joined(separator: "\n"),
                try cli.text(cli.publicKey),
                try cli.text(certificate),
            ]
            for text in cases {
                #expect(throws: OpenSSLError.self, "\(text.prefix(40).debugDescription)") { try RSASigningKey(pem: text) }
            }
            // A line reversed inside the modulus still parses (OpenSSL reads any numbers
            // in the right shape); the consistency check refuses it by name.
            do throws(OpenSSLError) {
                _ = try RSASigningKey(pem: lines.joined(separator: "\n"))
                Issue.record("accepted a damaged key")
            } catch {
                #expect(error.reasons == ["the private and public parts of the key do not match"], "\(error)")
            }
        }
    }

    /// An encrypted key is refused at once, by RSASigningKey and ECSigningKey alike:
    /// nothing asks for a passphrase. (OpenSSL's default callback would ask on the
    /// controlling terminal and wait; without one it fails with UI errors, which is how
    /// this test tells the two apart.)
    @Test func refusesEncryptedKeysWithoutAskingForAPassphrase() throws {
        let texts = try withTemporaryDirectory { directory in
            let rsa = directory.appendingPathComponent("rsa.pem").path
            let ec = directory.appendingPathComponent("ec.pem").path
            _ = try Shell.run("""
                openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -aes-256-cbc -pass pass:secret -out "$1" 2>/dev/null && \
                openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -aes-256-cbc -pass pass:secret -out "$2" 2>/dev/null
                """, [rsa, ec])
            return [try String(contentsOfFile: rsa, encoding: .utf8), try String(contentsOfFile: ec, encoding: .utf8)]
        }
        let attempts: [(String, () throws(OpenSSLError) -> Void)] = [
            ("RSASigningKey", { () throws(OpenSSLError) in _ = try RSASigningKey(pem: texts[0]) }),
            ("ECSigningKey", { () throws(OpenSSLError) in _ = try ECSigningKey(pem: texts[1]) }),
        ]
        for text in texts { #expect(text.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----")) }
        for (name, attempt) in attempts {
            do throws(OpenSSLError) {
                try attempt()
                Issue.record("\(name) accepted an encrypted key")
            } catch {
                #expect(error.reasons.contains { $0.contains("bad password read") }, "\(name): \(error)")
                #expect(!error.reasons.contains { $0.contains("UI routines") || $0.contains("UI lib") }, "\(name): \(error)")
            }
        }
    }
}

/// The `x5t` and `x5t#S256` thumbprints of a certificate, against the openssl CLI's
/// fingerprints.
@Suite struct CertificateThumbprintTests {
    @Test func matchesTheOpenSSLCommandsFingerprints() throws {
        try withTemporaryDirectory { directory in
            let dir = directory.path
            let output = try Shell.run("""
                cd "$1" && \
                openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -subj /CN=graph-app -days 2 -outform DER -out cert.der 2>/dev/null && \
                openssl x509 -inform DER -in cert.der -noout -fingerprint -sha1 && \
                openssl x509 -inform DER -in cert.der -noout -fingerprint -sha256
                """, [dir])
            func hex(_ line: Substring) -> String { line.split(separator: "=").last.map { $0.replacingOccurrences(of: ":",
                with: "").lowercased() } ?? "" }
            let lines = output.split(separator: "\n")
            let der = Array(try Data(contentsOf: directory.appendingPathComponent("cert.der")))
            let thumbprint = try CertificateThumbprint(certificateDER: der)
            #expect(lines.count == 2)
            #expect(Hex.encode(thumbprint.sha1) == hex(lines[0]))
            #expect(Hex.encode(thumbprint.sha256) == hex(lines[1]))
            #expect(thumbprint.sha1.count == 20 && thumbprint.sha256.count == 32)
            // The same certificate from a PKCS#12 bundle gives the same thumbprint.
            _ = try Shell.run("""
                cd "$1" && openssl x509 -inform DER -in cert.der -out cert.pem && \
                openssl pkcs12 -export -inkey key.pem -in cert.pem -passout pass:p -out bundle.p12
                """, [dir])
            let identity = try ClientIdentity(pkcs12: Array(try Data(contentsOf: directory.appendingPathComponent("bundle.p12"))), password: "p")
            #expect(try CertificateThumbprint(certificateDER: identity.certificateDER) == thumbprint)
        }
    }

    @Test func refusesWhatIsNotExactlyOneDERCertificate() throws {
        try withTemporaryDirectory { directory in
            _ = try Shell.run("""
                cd "$1" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -subj /CN=x -days 2 -out cert.pem \
                2>/dev/null && \
                openssl x509 -in cert.pem -outform DER -out cert.der && openssl pkey -in key.pem -outform DER -out key.der
                """, [directory.path])
            let der = Array(try Data(contentsOf: directory.appendingPathComponent("cert.der")))
            let cases: [[UInt8]] = [
                [], [0x30], Array(der.prefix(der.count - 1)), der + [0],
                Array(try Data(contentsOf: directory.appendingPathComponent("cert.pem"))),
                Array(try Data(contentsOf: directory.appendingPathComponent("key.der"))),
            ]
            for bytes in cases {
                #expect(throws: OpenSSLError.self, "\(bytes.count) bytes") { try CertificateThumbprint(certificateDER: bytes) }
            }
            do throws(OpenSSLError) {
                _ = try CertificateThumbprint(certificateDER: der + [0, 0])
                Issue.record("accepted trailing bytes")
            } catch {
                #expect(error.reasons == ["2 bytes after the certificate"], "\(error)")
            }
        }
    }
}
