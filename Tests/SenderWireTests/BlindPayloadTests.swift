import Foundation
import Testing
@testable import ENSModel
@testable import SenderWire

/// The `blind` payload (docs/api.md): a generic alert with mutable-content, the device's
/// tag, and Graph's ciphertext as ENS received it; nothing of the mail in clear.
@Suite struct BlindPayloadTests {
    static let content = Array((#"{"id":"AAMk","data":"QUJD","dataKey":"S0VZ","dataSignature":"U0lH","encryptionCertificateId":"c1","# +
                                #""encryptionCertificateThumbprint":"AB"}"#).utf8)

    func payload(badge: Int? = 4) -> MailPayload {
        MailPayload(sender: "Never Shown", subject: "Never shown either", userID: String(repeating: "ab", count: 32), deviceTag: "tag-1",
                    badge: badge, syncKey: (key: "KEK", expiresAt: Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)),
                    notificationID: String(repeating: "0f", count: 16), createdAt: Timestamp(millisecondsSinceEpoch: 1_764_000_000_123))
    }

    @Test func carriesTheCiphertextAndNothingInClear() throws {
        let bytes = payload().blind(Self.content)
        let text = String(decoding: bytes, as: UTF8.self)
        for secret in ["Never Shown", "Never shown either", "KEK", String(repeating: "ab", count: 32)] {
            #expect(!text.contains(secret), "\(secret)")
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        let aps = try #require(object["aps"] as? [String: Any])
        #expect(aps["alert"] as? [String: String] == ["title": "New mail", "body": ""])
        #expect(aps["mutable-content"] as? Int == 1 && aps["badge"] == nil)
        let ens = try #require(object["ens"] as? [String: Any])
        #expect(Set(ens.keys) == ["tag", "id", "ts", "privacy", "blind"] && ens["privacy"] as? String == "blind")
        #expect((ens["blind"] as? [String: String])?["encryptionCertificateId"] == "c1")
        #expect(Set(object.keys) == ["aps", "ens"])
    }

    @Test func withoutContentThePushOnlyNamesTheNotification() throws {
        let object = try #require(try JSONSerialization.jsonObject(with: Data(payload().blind(nil))) as? [String: Any])
        let ens = try #require(object["ens"] as? [String: Any])
        #expect(ens["blind"] == nil && ens["privacy"] as? String == "blind")
        let huge = Array(#"{"data":""#.utf8) + [UInt8](repeating: UInt8(ascii: "A"), count: 4096) + Array(#""}"#.utf8)
        #expect(!payload().fitsBlind(huge) && payload().fitsBlind(Self.content))
    }

    @Test func blindNeedsItsCertificateAndIsNoFloor() {
        #expect(PrivacyMode.blind.raised(to: .preview, hasPreviewKey: true) == .blind)
        #expect(PrivacyMode.blind.raised(to: .secure, hasPreviewKey: true) == .blind)
        #expect(PrivacyMode.blind.raised(to: .preview, hasPreviewKey: false) == .secure, "without a certificate: stricter, never weaker")
        #expect(!PrivacyMode.floors.contains(.blind))
        #expect(DevicePrivacy(mode: .blind, previewKey: [1, 2]).blindThumbprint == [1, 2])
        #expect(DevicePrivacy(mode: .secure, previewKey: [1, 2]).blindThumbprint == nil)
    }
}
