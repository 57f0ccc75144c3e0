import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing

/// DER helpers for cross-checks: the ASN.1 ECDSA-Sig-Value that openssl and Python expect,
/// built by hand from a raw r ‖ s.
enum ECDSASignatureDER {
    static func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var value = Array(bytes.drop { $0 == 0 })
        if value.isEmpty { value = [0] }
        if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
        return [0x02, UInt8(value.count)] + value
    }

    static func fromRaw(_ raw: [UInt8]) -> [UInt8] {
        precondition(raw.count == 64)
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }
}

@Suite struct ECSigningKeyTests {
    /// Python's `cryptography` verifies raw r ‖ s signatures: argv[1] is a public key PEM
    /// file, argv[2] a file of `message-hex,signature-hex` lines; prints one `ok`/`bad`
    /// per line (and `short` for a signature that is not 64 bytes).
    static let pythonVerify = """
        import sys
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
        key = serialization.load_pem_public_key(open(sys.argv[1], 'rb').read())
        assert isinstance(key.curve, ec.SECP256R1), key.curve.name
        out = []
        for line in open(sys.argv[2]).read().splitlines():
            message, signature = (bytes.fromhex(part) for part in line.split(','))
            if len(signature) != 64:
                out.append('short'); continue
            der = encode_dss_signature(int.from_bytes(signature[:32], 'big'), int.from_bytes(signature[32:], 'big'))
            try:
                key.verify(der, message, ec.ECDSA(hashes.SHA256())); out.append('ok')
            except InvalidSignature:
                out.append('bad')
        print(' '.join(out))
        """

    /// Loads a private key PEM with Python; prints its curve name and its public key PEM
    /// (SubjectPublicKeyInfo).
    static let pythonDescribe = """
        import sys
        from cryptography.hazmat.primitives import serialization
        key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), password=None)
        print(key.curve.name)
        print(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())
        """

    static let shared: ECSigningKey = try! ECSigningKey.generate()

    static func pythonVerify(publicKeyPEM: String, _ cases: [(message: [UInt8], signature: [UInt8])], in directory: URL) throws -> [String] {
        let pemFile = directory.appendingPathComponent("pub.pem")
        let casesFile = directory.appendingPathComponent("cases.txt")
        try pemFile.write(publicKeyPEM)
        try casesFile.write(cases.map { Hex.encode($0.message) + "," + Hex.encode($0.signature) }.joined(separator: "\n"))
        let output = try Shell.python(pythonVerify, [pemFile.path, casesFile.path])
        return output.split(separator: " ").map(String.init)
    }

    // MARK: Keys

    @Test func generatedKeysArePKCS8AndDistinct() throws {
        let a = try ECSigningKey.generate()
        let b = try ECSigningKey.generate()
        let pem = try a.pem
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        #expect(pem.hasSuffix("-----END PRIVATE KEY-----\n"))
        #expect(try a.publicKeyPEM.hasPrefix("-----BEGIN PUBLIC KEY-----\n"))
        #expect(try a.pem != b.pem)
        #expect(try a.publicKeyPEM != b.publicKeyPEM)
    }

    @Test func pemRoundTrip() throws {
        let key = try ECSigningKey.generate()
        let reread = try ECSigningKey(pem: try key.pem)
        #expect(try reread.pem == key.pem)
        #expect(try reread.publicKeyPEM == key.publicKeyPEM)
        // Leading and trailing text around the PEM block is tolerated, as in a .p8 file.
        let padded = try ECSigningKey(pem: "\n\n" + (try key.pem) + "\n")
        #expect(try padded.publicKeyPEM == key.publicKeyPEM)
    }

    @Test func pythonReadsThePEMAsP256() throws {
        let key = Self.shared
        try withTemporaryDirectory { directory in
            let file = directory.appendingPathComponent("key.p8")
            try file.write(try key.pem)
            let output = try Shell.python(Self.pythonDescribe, [file.path])
            let lines = output.split(separator: "\n", maxSplits: 1).map(String.init)
            #expect(lines.first == "secp256r1")
            #expect(lines.last == (try key.publicKeyPEM).trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    @Test func readsKeysMadeByTheOpenSSLCommand() throws {
        try withTemporaryDirectory { directory in
            let pkcs8 = directory.appendingPathComponent("pkcs8.pem").path
            let sec1 = directory.appendingPathComponent("sec1.pem").path
            let pub = directory.appendingPathComponent("pub.pem").path
            _ = try Shell.run("""
                openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null &&
                openssl ec -in "$1" -out "$2" 2>/dev/null &&
                openssl pkey -in "$1" -pubout -out "$3"
                """, [pkcs8, sec1, pub])
            let expectedPublic = try String(contentsOfFile: pub, encoding: .utf8)
            let expectedPrivate = try String(contentsOfFile: pkcs8, encoding: .utf8)
            for path in [pkcs8, sec1] {
                let key = try ECSigningKey(pem: try String(contentsOfFile: path, encoding: .utf8))
                #expect(try key.publicKeyPEM == expectedPublic, "\(path)")
                // Written back as PKCS#8 PEM, byte for byte what the CLI writes.
                #expect(try key.pem == expectedPrivate, "\(path)")
            }
            #expect(try String(contentsOfFile: sec1, encoding: .utf8).hasPrefix("-----BEGIN EC PRIVATE KEY-----"))
        }
    }

    @Test func refusesGarbage() throws {
        let pem = try Self.shared.pem
        var lines = pem.split(separator: "\n").map(String.init)
        lines[1] = String(lines[1].reversed())
        let cases = [
            "", "garbage", "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            String(pem.prefix(pem.count / 2)),
            lines.joined(separator: "\n"),
            try Self.shared.publicKeyPEM,
        ]
        for text in cases {
            #expect(throws: OpenSSLError.self, "\(text.prefix(40).debugDescription)") { try ECSigningKey(pem: text) }
        }
    }

    @Test func refusesAnRSAKey() throws {
        // TestKeys.primary's PKCS#8 DER, as PEM.
        let der = try TestKeys.primary.derRepresentation
        let body = Base64Lines.wrap(Data(der).base64EncodedString())
        let pem = "-----BEGIN PRIVATE KEY-----\n" + body + "-----END PRIVATE KEY-----\n"
        do throws(OpenSSLError) {
            _ = try ECSigningKey(pem: pem)
            Issue.record("accepted an RSA key")
        } catch {
            #expect(error.reasons.contains("not a P-256 EC key"), "\(error)")
        }
    }

    @Test func refusesOtherAlgorithmsAndCurves() throws {
        for options in ["-algorithm EC -pkeyopt ec_paramgen_curve:P-384", "-algorithm EC -pkeyopt ec_paramgen_curve:P-521",
                        "-algorithm ed25519", "-algorithm x25519"] {
            let pem = try Shell.genpkey(options)
            #expect(throws: OpenSSLError.self, "\(options)") { try ECSigningKey(pem: pem) }
        }
    }

    /// Other 256-bit curves are not P-256: ES256 is defined on P-256 only, and APNs
    /// would reject every token signed with such a key.
    @Test func refusesOther256BitCurves() throws {
        for curve in ["secp256k1", "brainpoolP256r1"] {
            let pem = try Shell.genpkey("-algorithm EC -pkeyopt ec_paramgen_curve:\(curve)")
            #expect(throws: OpenSSLError.self, "\(curve)") { try ECSigningKey(pem: pem) }
        }
    }

    // MARK: Signatures

    @Test func signaturesAre64BytesAndVerifyInPython() throws {
        let key = Self.shared
        var generator = SeededGenerator(seed: 0xEC256)
        var cases: [(message: [UInt8], signature: [UInt8])] = []
        for length in [0, 1, 32, 55, 56, 64, 1000] + (0..<200).map({ _ in Int.random(in: 0...300, using: &generator) }) {
            let message = generator.bytes(length)
            let signature = try key.signES256(message)
            #expect(signature.count == 64)
            cases.append((message, signature))
        }
        // Tampered messages and signatures must not verify.
        var wrongMessage = cases[2]
        wrongMessage.message[0] ^= 1
        var wrongSignature = cases[3]
        wrongSignature.signature[63] ^= 1
        var swapped = cases[4]
        swapped.signature = Array(swapped.signature[32...] + swapped.signature[..<32])
        let otherKey = try ECSigningKey.generate()
        let results = try withTemporaryDirectory { directory in
            try Self.pythonVerify(publicKeyPEM: try key.publicKeyPEM, cases + [wrongMessage, wrongSignature, swapped], in: directory)
        }
        #expect(results.count == cases.count + 3)
        #expect(results.prefix(cases.count).allSatisfy { $0 == "ok" })
        #expect(Array(results.suffix(3)) == ["bad", "bad", "bad"])
        // Another key's public half does not verify these.
        let foreign = try withTemporaryDirectory { directory in
            try Self.pythonVerify(publicKeyPEM: try otherKey.publicKeyPEM, Array(cases.prefix(5)), in: directory)
        }
        #expect(foreign == ["bad", "bad", "bad", "bad", "bad"])
    }

    @Test func signaturesAreRandomized() throws {
        // ECDSA with a fresh nonce: two signatures of one message differ.
        let message = Array("same".utf8)
        #expect(try Self.shared.signES256(message) != Self.shared.signES256(message))
    }

    @Test func openSSLCommandVerifiesSignatures() throws {
        let key = try ECSigningKey.generate()
        try withTemporaryDirectory { directory in
            let pub = directory.appendingPathComponent("pub.pem")
            try pub.write(try key.publicKeyPEM)
            var generator = SeededGenerator(seed: 0x055)
            for (index, length) in [0, 1, 100, 4096].enumerated() {
                let message = generator.bytes(length)
                let signature = try key.signES256(message)
                let messageFile = directory.appendingPathComponent("m\(index)")
                let signatureFile = directory.appendingPathComponent("s\(index).der")
                try messageFile.write(message)
                try signatureFile.write(ECDSASignatureDER.fromRaw(signature))
                let verdict = try Shell.run(
                    "openssl dgst -sha256 -verify \"$1\" -signature \"$2\" \"$3\" 2>/dev/null || echo REFUSED",
                    [pub.path, signatureFile.path, messageFile.path])
                #expect(verdict == "Verified OK", "length \(length)")
                // A different message fails.
                try messageFile.write(message + [0])
                let tampered = try Shell.run(
                    "openssl dgst -sha256 -verify \"$1\" -signature \"$2\" \"$3\" 2>/dev/null || echo REFUSED",
                    [pub.path, signatureFile.path, messageFile.path])
                #expect(tampered.hasSuffix("REFUSED"), "length \(length)")
            }
        }
    }

    @Test func derHelperMatchesPython() throws {
        // The hand-built DER (used for the openssl check) agrees with cryptography's
        // encode_dss_signature, including leading-zero and high-bit cases.
        let program = """
            import sys
            from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
            raw = bytes.fromhex(sys.argv[1])
            print(encode_dss_signature(int.from_bytes(raw[:32], 'big'), int.from_bytes(raw[32:], 'big')).hex())
            """
        var generator = SeededGenerator(seed: 0xD3E)
        var raws: [[UInt8]] = [
            [UInt8](repeating: 0, count: 31) + [1] + [0x80] + [UInt8](repeating: 0xFF, count: 31),
            [0, 0, 0x7F] + generator.bytes(29) + [0xFF] + generator.bytes(31),
        ]
        raws.append(generator.bytes(64))
        for raw in raws {
            #expect(Hex.encode(ECDSASignatureDER.fromRaw(raw)) == (try Shell.python(program, [Hex.encode(raw)])))
        }
    }
}

enum Base64Lines {
    /// PEM body lines of 64 characters, each ending in a newline.
    static func wrap(_ base64: String) -> String {
        var output = ""
        var line = ""
        for character in base64 {
            line.append(character)
            if line.count == 64 {
                output += line + "\n"
                line = ""
            }
        }
        if !line.isEmpty { output += line + "\n" }
        return output
    }
}
