import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing
@testable import ENSVault

/// ENS preview encryption v1 against docs/privacy.md (its test vector and its Python
/// decryptor, read from the page) and against Tests/tools/preview_encryption.py, an
/// independent implementation with Python's `cryptography`.
@Suite struct PreviewEncryptionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let notificationID = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    static let plaintextSizes = [0, 1, 15, 16, 17, 100, 3072]

    static func bytes(_ hex: String) -> [UInt8] { Hex.decode(hex) ?? [] }

    // MARK: docs/privacy.md

    static func privacyPage() throws -> String {
        try String(contentsOf: root.appendingPathComponent("docs/privacy.md"), encoding: .utf8)
    }

    /// The lines of the first fenced block whose info string is `info`.
    static func fencedBlock(_ info: String, in page: String) throws -> [String] {
        let lines = page.components(separatedBy: "\n")
        let start = try #require(lines.firstIndex(of: "```" + info), "no ```\(info) block in docs/privacy.md")
        let end = try #require(lines[(start + 1)...].firstIndex(of: "```"), "unterminated ```\(info) block")
        return Array(lines[(start + 1)..<end])
    }

    /// The documented vector: `name: value` lines, in the page's order.
    static func documentedVector() throws -> [(name: String, value: String)] {
        try fencedBlock("test-vector", in: privacyPage()).map { line in
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            try #require(parts.count == 2, "not a `name: value` line: \(line)")
            return (parts[0], parts[1])
        }
    }

    static func vectorValue(_ name: String, _ vector: [(name: String, value: String)]) throws -> String {
        try #require(vector.first { $0.name == name }?.value, "the vector has no \(name)")
    }

    // MARK: Python

    /// Runs Tests/tools/preview_encryption.py; returns its output.
    static func tool(_ arguments: [String]) throws -> String {
        try Shell.run("exec python3 \"$@\"", [root.appendingPathComponent("Tests/tools/preview_encryption.py").path] + arguments)
    }

    /// A JSON list of hex strings (null for refused) as byte strings.
    static func hexList(_ json: String) throws -> [[UInt8]?] {
        let list = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [Any])
        return list.map { ($0 as? String).flatMap(Hex.decode) }
    }

    /// The page's Python decryptor as written, with a harness: argv is the recipient
    /// scalar, the notification id and blobs; prints a JSON list (null for refused).
    static func documentedDecryptor() throws -> String {
        try fencedBlock("python", in: privacyPage()).joined(separator: "\n") + """

            import json, sys
            from cryptography.exceptions import InvalidTag
            key = ec.derive_private_key(int(sys.argv[1], 16), ec.SECP256R1())
            out = []
            for blob in sys.argv[3:]:
                try:
                    out.append(open_preview(bytes.fromhex(blob), key, sys.argv[2]).hex())
                except (ValueError, InvalidTag):
                    out.append(None)
            print(json.dumps(out))
            """
    }

    /// A recipient whose scalar both sides know (Python's tools take scalars).
    static func recipient(seed: UInt64) throws -> (key: P256KeyAgreementKey, scalar: String) {
        var generator = SeededGenerator(seed: seed)
        let scalar = generator.bytes(32)  // below the order with overwhelming odds; the init checks
        return (try P256KeyAgreementKey(rawPrivateKey: scalar), Hex.encode(scalar))
    }

    // MARK: The documented vector

    @Test func theDocumentedVectorIsWhatENSComputes() throws {
        let vector = try Self.documentedVector()
        func value(_ name: String) throws -> [UInt8] { Self.bytes(try Self.vectorValue(name, vector)) }
        let recipient = try P256KeyAgreementKey(rawPrivateKey: try value("recipient_private_key"))
        let ephemeral = try P256KeyAgreementKey(rawPrivateKey: try value("ephemeral_private_key"))
        let notificationID = try Self.vectorValue("notification_id", vector)
        let plaintext = try value("plaintext")
        #expect(recipient.publicKey.x963 == (try value("recipient_public_key")))
        #expect(ephemeral.publicKey.x963 == (try value("ephemeral_public_key")))
        let shared = try ephemeral.sharedSecret(with: recipient.publicKey)
        #expect(shared == (try value("shared_secret")))
        #expect(try recipient.sharedSecret(with: ephemeral.publicKey) == shared)
        let messageKey = try HKDF.sha256(ikm: shared, salt: ephemeral.publicKey.x963 + recipient.publicKey.x963,
                                         info: Array("ENS preview v1".utf8), length: 32)
        #expect(messageKey == (try value("message_key")))
        let blob = try PreviewEncryption.seal(plaintext, to: recipient.publicKey, notificationID: notificationID,
                                              ephemeralKey: ephemeral, nonce: try value("nonce"))
        #expect(blob == (try value("blob")))
        #expect(try PreviewEncryption.open(try value("blob"), with: recipient, notificationID: notificationID) == plaintext)
        // The page's prose names the plaintext as text.
        #expect(try Self.privacyPage().contains("`" + String(decoding: plaintext, as: UTF8.self) + "`"))
    }

    /// Python, given the vector's inputs, writes the same block: the documented values
    /// come from two implementations, not from ENS alone.
    @Test func pythonWritesTheDocumentedVector() throws {
        let vector = try Self.documentedVector()
        let inputs = try ["recipient_private_key", "ephemeral_private_key", "nonce", "notification_id", "plaintext"].map {
            try Self.vectorValue($0, vector)
        }
        let written = try Self.tool(["vector"] + inputs)
        #expect(written == vector.map { "\($0.name): \($0.value)" }.joined(separator: "\n"))
    }

    @Test func theDocumentedDecryptorOpensTheVectorAndENSBlobs() throws {
        let vector = try Self.documentedVector()
        let scalar = try Self.vectorValue("recipient_private_key", vector)
        let notificationID = try Self.vectorValue("notification_id", vector)
        let recipient = try P256KeyAgreementKey(rawPrivateKey: Self.bytes(scalar))
        var generator = SeededGenerator(seed: 0xD0C5)
        let plaintexts = Self.plaintextSizes.map { generator.bytes($0) }
        var blobs = try plaintexts.map { try PreviewEncryption.seal($0, to: recipient.publicKey, notificationID: notificationID) }
        blobs.append(Self.bytes(try Self.vectorValue("blob", vector)))
        var tampered = blobs[2]
        tampered[tampered.count - 1] ^= 1
        let opened = try Self.hexList(try Shell.python(try Self.documentedDecryptor(),
                                                       [scalar, notificationID] + (blobs + [tampered]).map(Hex.encode)))
        let expected: [[UInt8]?] = plaintexts + [Self.bytes(try Self.vectorValue("plaintext", vector)), nil]
        #expect(opened == expected)
        // The wrong id: nothing opens.
        let wrongID = try Self.hexList(try Shell.python(try Self.documentedDecryptor(), [scalar, Self.notificationID] + blobs.map(Hex.encode)))
        #expect(wrongID.allSatisfy { $0 == nil })
    }

    // MARK: Cross-checks with Python

    @Test func pythonOpensWhatENSSeals() throws {
        let (recipient, scalar) = try Self.recipient(seed: 0x5EA1)
        var generator = SeededGenerator(seed: 0x0BE1)
        let plaintexts = Self.plaintextSizes.map { generator.bytes($0) } + [Array(#"{"subject":"Grüße","from":"Zoë"}"#.utf8)]
        let blobs = try plaintexts.map { try PreviewEncryption.seal($0, to: recipient.publicKey, notificationID: Self.notificationID) }
        for (blob, plaintext) in zip(blobs, plaintexts) {
            #expect(blob.count == PreviewEncryption.minimumBlobSize + plaintext.count)
            #expect(blob[0] == 1)
        }
        let opened = try Self.hexList(try Self.tool(["decrypt", scalar, Self.notificationID] + blobs.map(Hex.encode)))
        #expect(opened == plaintexts)
        // Under another id, or with another key, Python opens none of them.
        let otherID = try Self.hexList(try Self.tool(["decrypt", scalar, "1" + Self.notificationID.dropFirst()] + blobs.map(Hex.encode)))
        #expect(otherID.allSatisfy { $0 == nil })
        let otherKey = try Self.recipient(seed: 0x5EA2).scalar
        let wrongKey = try Self.hexList(try Self.tool(["decrypt", otherKey, Self.notificationID] + blobs.map(Hex.encode)))
        #expect(wrongKey.allSatisfy { $0 == nil })
    }

    @Test func ensOpensWhatPythonSeals() throws {
        let (recipient, _) = try Self.recipient(seed: 0x0E1)
        var generator = SeededGenerator(seed: 0x0E2)
        let plaintexts = Self.plaintextSizes.map { generator.bytes($0) }
        let blobs = try Self.hexList(try Self.tool(["encrypt", Hex.encode(recipient.publicKey.x963),
                                                    Self.notificationID] + plaintexts.map(Hex.encode)))
        try #require(blobs.count == plaintexts.count)
        for (blob, plaintext) in zip(blobs, plaintexts) {
            let blob = try #require(blob)
            #expect(try PreviewEncryption.open(blob, with: recipient, notificationID: Self.notificationID) == plaintext, "\(plaintext.count) bytes")
        }
    }

    // MARK: Sealing

    @Test func twoSealsOfOneMessageDiffer() throws {
        let (recipient, _) = try Self.recipient(seed: 1)
        let plaintext = Array(#"{"subject":"same"}"#.utf8)
        let first = try PreviewEncryption.seal(plaintext, to: recipient.publicKey, notificationID: Self.notificationID)
        let second = try PreviewEncryption.seal(plaintext, to: recipient.publicKey, notificationID: Self.notificationID)
        #expect(first[1..<66] != second[1..<66], "a fresh ephemeral key")
        #expect(first[66..<78] != second[66..<78], "a fresh nonce")
        #expect(first[1..<66] != recipient.publicKey.x963[...])
        #expect(try PreviewEncryption.open(first, with: recipient, notificationID: Self.notificationID) == plaintext)
        #expect(try PreviewEncryption.open(second, with: recipient, notificationID: Self.notificationID) == plaintext)
    }

    @Test func sealRefusesAMalformedNotificationID() throws {
        let (recipient, _) = try Self.recipient(seed: 2)
        for id in ["", "0F1E2D3C4B5A69788796A5B4C3D2E1F0", String(Self.notificationID.dropLast()), Self.notificationID + "0",
                   "0f1e2d3c4b5a69788796a5b4c3d2e1fg", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1"] {
            #expect(throws: PreviewEncryptionError.malformedNotificationID, "\(id)") {
                try PreviewEncryption.seal([1], to: recipient.publicKey, notificationID: id)
            }
        }
    }

    // MARK: Opening refuses

    /// Every byte altered — version, E, nonce, ciphertext, tag — and every truncation
    /// or extension: the one `cannotOpen`.
    @Test func everyAlterationIsCannotOpen() throws {
        let (recipient, _) = try Self.recipient(seed: 3)
        let blob = try PreviewEncryption.seal(Array("attack at dawn".utf8), to: recipient.publicKey, notificationID: Self.notificationID)
        var altered: [[UInt8]] = []
        for index in blob.indices {
            for flip: UInt8 in [0x01, 0x80] {
                var copy = blob
                copy[index] ^= flip
                altered.append(copy)
            }
        }
        altered += (0..<blob.count).map { Array(blob.prefix($0)) }
        altered += [blob + [0], [2] + blob.dropFirst(), [0] + blob.dropFirst()]
        for (index, candidate) in altered.enumerated() {
            #expect(throws: PreviewEncryptionError.cannotOpen, "case \(index)") {
                try PreviewEncryption.open(candidate, with: recipient, notificationID: Self.notificationID)
            }
        }
    }

    /// E and −E share their x-coordinate, so Z is the same for both; only the salt,
    /// which holds E, tells them apart.
    @Test func theNegatedEphemeralPointDoesNotOpen() throws {
        let (recipient, _) = try Self.recipient(seed: 4)
        let blob = try PreviewEncryption.seal(Array("hello".utf8), to: recipient.publicKey, notificationID: Self.notificationID)
        let prime = Self.bytes("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff")
        var negated = blob
        var borrow = 0
        for index in (0..<32).reversed() {
            let difference = Int(prime[index]) - Int(blob[34 + index]) - borrow
            negated[34 + index] = UInt8((difference + 256) % 256)
            borrow = difference < 0 ? 1 : 0
        }
        let point = try P256PublicKey(bytes: Array(negated[1..<66]))  // on the curve
        #expect(try recipient.sharedSecret(with: point) == recipient.sharedSecret(with: try P256PublicKey(bytes: Array(blob[1..<66]))))
        #expect(throws: PreviewEncryptionError.cannotOpen) {
            try PreviewEncryption.open(negated, with: recipient, notificationID: Self.notificationID)
        }
    }

    @Test func wrongIDOrKeyIsCannotOpen() throws {
        let (recipient, _) = try Self.recipient(seed: 5)
        let blob = try PreviewEncryption.seal(Array("x".utf8), to: recipient.publicKey, notificationID: Self.notificationID)
        for id in ["", Self.notificationID.uppercased(), "f" + Self.notificationID.dropFirst(), Self.notificationID + " "] {
            #expect(throws: PreviewEncryptionError.cannotOpen, "\(id)") { try PreviewEncryption.open(blob, with: recipient, notificationID: id) }
        }
        #expect(throws: PreviewEncryptionError.cannotOpen) {
            try PreviewEncryption.open(blob, with: try P256KeyAgreementKey.generate(), notificationID: Self.notificationID)
        }
        // An ephemeral point off the curve.
        var offCurve = blob
        offCurve.replaceSubrange(1..<66, with: [0x04] + [UInt8](repeating: 1, count: 64))
        #expect(throws: PreviewEncryptionError.cannotOpen) { try PreviewEncryption.open(offCurve, with: recipient,
                                                                                        notificationID: Self.notificationID) }
        #expect(PreviewEncryptionError.cannotOpen.description == "cannot open the encrypted preview")
    }

    // MARK: The device's key

    /// `point`'s SubjectPublicKeyInfo naming prime192v1 (1.2.840.10045.3.1.1) instead of
    /// prime256v1: 91 bytes, the length of a real one.
    static func otherCurveSPKI(_ point: [UInt8]) -> [UInt8] {
        bytes("3059301306072a8648ce3d020106082a8648ce3d030101034200") + point
    }

    @Test func recipientKeyReadsBothFormsInAnyBase64Spelling() throws {
        let (recipient, _) = try Self.recipient(seed: 6)
        let point = recipient.publicKey.x963
        let spki = recipient.publicKey.subjectPublicKeyInfo
        let padded = Base64.encode(spki)
        #expect(padded.hasSuffix("="))
        for text in [Base64.encode(point), Base64.encode(point).replacingOccurrences(of: "=", with: ""), padded,
                     padded.replacingOccurrences(of: "=", with: ""), String(padded.prefix(64)) + "\n" + padded.dropFirst(64)] {
            #expect(try PreviewEncryption.recipientKey(base64: text) == recipient.publicKey, "\(text)")
        }
    }

    @Test func recipientKeyRefusals() throws {
        let (recipient, _) = try Self.recipient(seed: 7)
        let point = recipient.publicKey.x963
        let compressed = [0x02 | (point[64] & 1)] + Array(point[1...32])
        let p384 = Base64.encode(try Shell.publicKeyDER(pem: try Shell.genpkey("-algorithm EC -pkeyopt ec_paramgen_curve:P-384")))
        let cases: [(String, String, String)] = [
            ("garbage", "!!!not base64!!!", "not base64"),
            ("empty", "", "expected a 65-byte"),
            ("data after padding", Base64.encode(point) + "AA", "not base64"),
            ("too long", String(repeating: "A", count: 1000), "longer than any accepted key"),
            ("64 bytes", Base64.encode(Array(point.dropFirst())), "expected a 65-byte"),
            ("66 bytes", Base64.encode(point + [0]), "expected a 65-byte"),
            ("not on the curve", Base64.encode([0x04] + [UInt8](repeating: 1, count: 64)), "not a point on P-256"),
            ("SubjectPublicKeyInfo of another curve", Base64.encode(Self.otherCurveSPKI(point)), "not a SubjectPublicKeyInfo of a P-256 point"),
            ("compressed", Base64.encode(compressed), "compressed points are not accepted"),
            ("P-384", p384, "expected a 65-byte"),
        ]
        for (name, text, reason) in cases {
            do throws(PreviewEncryptionError) {
                _ = try PreviewEncryption.recipientKey(base64: text)
                Issue.record("\(name) accepted")
            } catch {
                guard case .recipientKeyRefused(let said) = error else { Issue.record("\(name): \(error)"); continue }
                // Fixed text only: the reason never quotes what was sent.
                #expect(said.contains(reason), "\(name): \(said)")
                #expect(text.isEmpty || !error.description.contains(text), "\(name)")
            }
        }
    }
}
