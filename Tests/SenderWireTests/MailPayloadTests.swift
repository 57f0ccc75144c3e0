import ENSTestSupport
import Foundation
import OpenSSL
import Testing
@testable import ENSModel
@testable import ENSVault
@testable import SenderWire

/// The APNs payload of the contract's last section, and its 4096-byte bound.
@Suite struct MailPayloadTests {
    static let userID = String(repeating: "ab", count: 32)
    static let notificationID = String(repeating: "0f", count: 16)
    static let createdAt = Timestamp(millisecondsSinceEpoch: 1_764_000_000_123)

    static func decode(_ bytes: [UInt8]) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test func carriesExactlyTheContractsFields() throws {
        let expiry = Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)
        let full = try Self.decode(MailPayload(sender: "Ann", subject: "Hi", userID: Self.userID, badge: 3, sound: "chime.caf",
                                               syncKey: (key: "KEK", expiresAt: expiry), notificationID: Self.notificationID,
                                               createdAt: Self.createdAt).encoded)
        let aps = try #require(full["aps"] as? [String: Any])
        #expect(aps["alert"] as? [String: String] == ["title": "Ann", "body": "Hi"])
        #expect(aps["badge"] as? Int == 3)
        #expect(aps["sound"] as? String == "chime.caf")
        #expect(aps["content-available"] as? Int == 1)
        let ens = try #require(full["ens"] as? [String: Any])
        #expect(Set(ens.keys) == ["userid", "id", "ts"])
        #expect(ens["userid"] as? String == Self.userID && ens["id"] as? String == Self.notificationID)
        #expect((ens["ts"] as? NSNumber)?.int64Value == Self.createdAt.millisecondsSinceEpoch)
        #expect(full["backgroundSyncKey"] as? String == "KEK")
        #expect(full["syncKeyExpirationTime"] as? String == expiry.apiString)

        let bare = try Self.decode(MailPayload(sender: "Ann", subject: "Hi", userID: Self.userID).encoded)
        let bareAPS = try #require(bare["aps"] as? [String: Any])
        #expect(bareAPS["badge"] == nil && bareAPS["sound"] == nil)
        #expect(bare["backgroundSyncKey"] == nil && bare["syncKeyExpirationTime"] == nil)
        #expect(Set(bare.keys) == ["aps", "ens"])
    }

    @Test func longSubjectsAreCutOnCharacterBoundaries() throws {
        // Multi-byte characters, combining sequences and characters JSON must escape.
        for unit in ["é", "👩‍👩‍👧‍👦", "\"", "\u{1}", "a", "日本"] {
            let subject = String(repeating: unit, count: 5000)
            let bytes = MailPayload(sender: "Sender", subject: subject, userID: Self.userID, badge: 1, sound: "s").encoded
            #expect(bytes.count <= 4096, "\(unit): \(bytes.count)")
            #expect(bytes.count > 3900, "cut far too much for \(unit): \(bytes.count)")
            let decoded = try Self.decode(bytes)
            let body = try #require(((decoded["aps"] as? [String: Any])?["alert"] as? [String: String])?["body"])
            #expect(body.hasSuffix("…"))
            #expect(subject.hasPrefix(String(body.dropLast())))
        }
    }

    /// The history's entry is cut to what `NotificationLog.summary_sealed` holds once
    /// sealed: a mail with a subject of kilobytes still gets its row (and its push).
    @Test func theHistoryEntryIsCutToFitItsSealedColumn() throws {
        let vault = Vault(masterKey: try AESGCMKey(bytes: Digest.randomBytes(32)))
        for unit in ["é", "👩‍👩‍👧‍👦", "\"", "a"] {
            let subject = String(repeating: unit, count: 5000)
            let summary = MailPayload(sender: "Ann Example", subject: subject, userID: Self.userID).summary
            #expect(summary.count <= MailPayload.maximumSummaryBytes && summary.count > MailPayload.maximumSummaryBytes - 100,
                    "\(unit): \(summary.count)")
            let sealed = try vault.sealLogEntry(summary, part: .summary, notificationID: Array(repeating: 1, count: 16), deviceID: 7)
            #expect(sealed.count <= PushNotification.LogRow.maximumSummary, "\(unit): \(sealed.count) sealed")
            let decoded = try Self.decode(summary)
            let cut = try #require(decoded["subject"] as? String)
            #expect(cut.hasSuffix("…") && subject.hasPrefix(String(cut.dropLast())))
            #expect(decoded["sender"] as? String == "Ann Example")
            // A sender of kilobytes too: its first 256 characters, cut further if need be.
            let both = MailPayload(sender: String(repeating: unit, count: 600), subject: subject, userID: Self.userID).summary
            #expect(both.count <= MailPayload.maximumSummaryBytes, "\(unit): \(both.count)")
            let sender = try #require(try Self.decode(both)["sender"] as? String)
            #expect(String(repeating: unit, count: 256).hasPrefix(sender.hasSuffix("…") ? String(sender.dropLast()) : sender))
        }
        let short = try Self.decode(MailPayload(sender: "Ann", subject: "Lunch?", userID: Self.userID).summary)
        #expect(short as? [String: String] == ["sender": "Ann", "subject": "Lunch?"])
    }

    @Test func shortPayloadsAreLeftAlone() throws {
        let subject = String(repeating: "x", count: 3000)
        let decoded = try Self.decode(MailPayload(sender: "S", subject: subject, userID: Self.userID).encoded)
        #expect(((decoded["aps"] as? [String: Any])?["alert"] as? [String: String])?["body"] == subject)
    }

    static func private_(_ subject: String = "Quarterly numbers", badge: Int? = 4, isSummary: Bool = false) -> MailPayload {
        MailPayload(sender: "Ann Example", subject: subject, userID: userID, deviceTag: "dGFnLW9mLWRldmljZQ", badge: badge, sound: "chime.caf",
                    syncKey: (key: "SYNCKEY-123", expiresAt: Timestamp(millisecondsSinceEpoch: 1_900_000_000_000)),
                    notificationID: notificationID, createdAt: createdAt, isSummary: isSummary)
    }

    /// `generic`: "New mail" and the badge; no sender, subject or sync key. A summary's
    /// "N new messages" is no one's content, so it may show.
    @Test func genericShowsNeitherSenderNorSubjectNorSyncKey() throws {
        let bytes = Self.private_().encoded(.generic)
        let text = String(decoding: bytes, as: UTF8.self)
        for secret in ["Ann Example", "Quarterly", "SYNCKEY"] { #expect(!text.contains(secret)) }
        let decoded = try Self.decode(bytes)
        let aps = try #require(decoded["aps"] as? [String: Any])
        #expect(aps["alert"] as? [String: String] == ["title": "New mail", "body": ""])
        #expect(aps["badge"] as? Int == 4 && aps["mutable-content"] == nil)
        #expect((decoded["ens"] as? [String: Any])?["privacy"] as? String == "generic")
        let summary = try Self.decode(Self.private_("3 new messages", isSummary: true).encoded(.generic))
        #expect(((summary["aps"] as? [String: Any])?["alert"] as? [String: String])?["body"] == "3 new messages")
    }

    /// `secure`: the id and time alone (and the device's own sound); the content, for
    /// the fetch, is everything the preview had.
    @Test func secureCarriesTheIDAlone() throws {
        let payload = Self.private_()
        let decoded = try Self.decode(payload.encoded(.secure))
        let aps = try #require(decoded["aps"] as? [String: Any])
        #expect(aps["alert"] as? [String: String] == ["title": "New mail", "body": ""])
        #expect(aps["badge"] == nil && aps["mutable-content"] as? Int == 1 && aps["sound"] as? String == "chime.caf")
        #expect(Set(decoded.keys) == ["aps", "ens"])
        let ens = try #require(decoded["ens"] as? [String: Any])
        // The device's opaque tag, not the address's hash: nothing names the mailbox.
        #expect(Set(ens.keys) == ["tag", "id", "ts", "privacy"])
        #expect(ens["tag"] as? String == "dGFnLW9mLWRldmljZQ")
        #expect(payload.encoded(.encrypted) == payload.encoded(.secure), "encrypted without a key is never weaker than secure")
        let content = try Self.decode(payload.content)
        #expect(content["sender"] as? String == "Ann Example" && content["subject"] as? String == "Quarterly numbers")
        #expect(content["badge"] as? Int == 4 && content["backgroundSyncKey"] as? String == "SYNCKEY-123")
    }

    /// `encrypted`: a generic alert with `mutable-content`, and the content sealed to
    /// the device's key, cut so the payload stays within 4096 bytes however long the
    /// subject (the cross-check with Python's `cryptography` is PreviewEncryptionTests').
    @Test func encryptedSealsTheContentWithinTheLimit() throws {
        let device = try P256KeyAgreementKey.generate()
        for subject in ["Quarterly numbers", String(repeating: "日本", count: 3000)] {
            let bytes = try Self.private_(subject).encrypted(to: device.publicKey)
            #expect(bytes.count <= 4096 && !String(decoding: bytes, as: UTF8.self).contains("Ann Example"))
            let decoded = try Self.decode(bytes)
            let aps = try #require(decoded["aps"] as? [String: Any])
            #expect(aps["mutable-content"] as? Int == 1 && aps["badge"] == nil)
            let ens = try #require(decoded["ens"] as? [String: Any])
            #expect(ens["privacy"] as? String == "encrypted")
            let enc = try #require(ens["enc"] as? String)
            let blob = try #require(Data(base64Encoded: enc))
            let opened = try Self.decode(try PreviewEncryption.open(Array(blob), with: device, notificationID: Self.notificationID))
            let shown = try #require(opened["subject"] as? String)
            #expect(shown == subject || (shown.hasSuffix("…") && subject.hasPrefix(String(shown.dropLast()))))
            #expect(opened["backgroundSyncKey"] as? String == "SYNCKEY-123" && opened["badge"] as? Int == 4)
        }
    }

    /// The floor raises, never lowers; `encrypted` without a key becomes `secure`.
    @Test func theFloorRaisesModes() {
        #expect(PrivacyMode.preview.raised(to: .generic, hasPreviewKey: false) == .generic)
        #expect(PrivacyMode.secure.raised(to: .generic, hasPreviewKey: false) == .secure)
        #expect(PrivacyMode.generic.raised(to: .encrypted, hasPreviewKey: false) == .secure)
        #expect(PrivacyMode.encrypted.raised(to: .encrypted, hasPreviewKey: true) == .encrypted)
        #expect(PrivacyMode.encrypted.raised(to: .preview, hasPreviewKey: true) == .encrypted)
        #expect(PrivacyMode.allCases.allSatisfy { PrivacyMode(name: $0.name) == $0 })
        #expect(PrivacyMode(name: "Preview") == nil)
    }
}

/// PKCS#12 client identities, cross-checked against the openssl CLI.
@Suite struct ClientIdentityTests {
    @Test func opensABundleMadeByTheOpenSSLCLI() throws {
        try withTemporaryDirectory { directory in
            let dir = directory.path
            _ = try Shell.run("""
                cd "$1" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=user@example.test \
                  -keyout key.pem -out cert.pem 2>/dev/null && \
                openssl pkcs12 -export -inkey key.pem -in cert.pem -passout pass:p12-Secret -out bundle.p12 && \
                openssl x509 -in cert.pem -outform DER -out cert.der && \
                openssl pkcs8 -topk8 -nocrypt -in key.pem -outform DER -out key.der
                """, [dir])
            let bundle = Array(try Data(contentsOf: directory.appendingPathComponent("bundle.p12")))
            let identity = try ClientIdentity(pkcs12: bundle, password: "p12-Secret")
            #expect(identity.certificateDER == Array(try Data(contentsOf: directory.appendingPathComponent("cert.der"))))
            #expect(identity.privateKeyDER == Array(try Data(contentsOf: directory.appendingPathComponent("key.der"))))
            // The PEM forms read back with the CLI as the same objects.
            try directory.appendingPathComponent("out-cert.pem").write(identity.certificatePEM)
            try directory.appendingPathComponent("out-key.pem").write(identity.privateKeyPEM)
            let fingerprints = try Shell.run("""
                cd "$1" && openssl x509 -in out-cert.pem -noout -fingerprint -sha256 && openssl x509 -in cert.pem -noout -fingerprint -sha256 && \
                openssl pkey -in out-key.pem -pubout | openssl sha256 -r && openssl pkey -in key.pem -pubout | openssl sha256 -r
                """, [dir]).split(separator: "\n")
            #expect(fingerprints.count == 4 && fingerprints[0] == fingerprints[1] && fingerprints[2] == fingerprints[3])
            // Byte for byte the PEM the CLI wrote (PKCS#8 for the key).
            #expect(identity.certificatePEM == Array(try Data(contentsOf: directory.appendingPathComponent("cert.pem"))))
            #expect(identity.privateKeyPEM == Array(try Data(contentsOf: directory.appendingPathComponent("key.pem"))))

            // The same identity from one PEM file holding key and certificate (either order).
            let combined = Array(try Data(contentsOf: directory.appendingPathComponent("key.pem")))
                + Array(try Data(contentsOf: directory.appendingPathComponent("cert.pem")))
            #expect(try ClientIdentity(pem: combined) == identity)
            #expect(throws: OpenSSLError.self) { try ClientIdentity(pem: Array(try Data(contentsOf: directory.appendingPathComponent("cert.pem")))) }
            #expect(throws: OpenSSLError.self) { try ClientIdentity(pem: Array("-----BEGIN CERTIFICATE-----\ngarbage\n".utf8)) }

            #expect(throws: ClientIdentity.PKCS12Error.wrongPassword) { try ClientIdentity(pkcs12: bundle, password: "wrong") }
            #expect(throws: ClientIdentity.PKCS12Error.self) { try ClientIdentity(pkcs12: Array(bundle.prefix(100)), password: "p12-Secret") }
            #expect(throws: ClientIdentity.PKCS12Error.self) { try ClientIdentity(pkcs12: Array("not pkcs12".utf8), password: "") }
        }
    }
}
