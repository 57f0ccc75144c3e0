import Foundation
import Testing
@testable import ENSKit

/// ENSPush against the payloads ENS sends (docs/api.md, docs/privacy.md; the shapes of
/// Sources/SenderWire/MailPayload.swift and the FCM provider), and payloads it never
/// sends, refused.
struct PushTests {
    static let id = "a4b5bee1dca2665f254fb64528934a16"

    func parse(_ json: String) throws -> [AnyHashable: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test func previewFromAPNs() throws {
        let push = try ENSPush(userInfo: try parse("""
            {"aps": {"alert": {"title": "Ann Example", "body": "Lunch?"}, "badge": 3, "sound": "default", "content-available": 1},
             "ens": {"userid": "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab", "id": "\(Self.id)", "ts": 1764081234567},
             "backgroundSyncKey": "kek", "syncKeyExpirationTime": "12/22/2026 00:00:00.000"}
            """))
        #expect(push.kind == .newMail && push.mode == .preview && push.id == Self.id && push.timestamp == 1_764_081_234_567)
        #expect(push.userID == "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab" && push.tag == nil)
        #expect(push.previewContent == ENSNotificationContent(sender: "Ann Example", subject: "Lunch?", badge: 3,
                                                              syncKey: ENSSyncKey(key: "kek", expirationText: "12/22/2026 00:00:00.000")))
        #expect(push.time == Date(timeIntervalSince1970: 1_764_081_234.567))
    }

    @Test func privateModesFromAPNs() throws {
        let generic = try ENSPush(userInfo: try parse("""
            {"aps": {"alert": {"title": "New mail", "body": ""}, "badge": 3, "content-available": 1},
             "ens": {"tag": "Ab3dEf6hIj9kLm0n", "id": "\(Self.id)", "ts": 1764081234567, "privacy": "generic"}}
            """))
        #expect(generic.mode == .generic && generic.tag == "Ab3dEf6hIj9kLm0n" && generic.badge == 3 && generic.previewContent == nil)

        let blob = Data(try #require(Hex.decode(CryptoTests.vectorBlob)))
        let encrypted = try ENSPush(userInfo: try parse("""
            {"aps": {"alert": {"title": "New mail", "body": ""}, "content-available": 1, "mutable-content": 1},
             "ens": {"tag": "Ab3dEf6hIj9kLm0n", "id": "\(Self.id)", "ts": 1764081234567, "privacy": "encrypted", "enc": \
            "\(blob.base64EncodedString())"}}
            """))
        #expect(encrypted.mode == .encrypted && encrypted.encryptedContent == blob)
        // The documented vector's plaintext is not ENS's content object (it says `from`),
        // so it opens but is refused as content.
        let key = try ENSPreviewKey(
            rawRepresentation: Data(try #require(Hex.decode("2fe4420c5ca27e1aa01858c186639f5aca3e18535e13eb81fe1dc0f5f52aab88"))))
        #expect(throws: ENSPushError.doesNotOpen) { try encrypted.decryptedContent(with: key) }
        #expect(throws: ENSPushError.doesNotOpen) { try encrypted.decryptedContent(with: ENSPreviewKey()) }

        let secure = try ENSPush(userInfo: try parse("""
            {"aps": {"alert": {"title": "New mail", "body": ""}, "content-available": 1, "mutable-content": 1},
             "ens": {"tag": "Ab3dEf6hIj9kLm0n", "id": "\(Self.id)", "ts": 1764081234567, "privacy": "secure"}}
            """))
        #expect(secure.mode == .secure && secure.encryptedContent == nil)
        #expect(throws: ENSPushError.wrongMode) { try secure.decryptedContent(with: key) }

        let resubscribe = try ENSPush(userInfo: try parse(#"{"aps": {"content-available": 1}, "ens": {"tag": "Ab3dEf6hIj9kLm0n","# +
                                                          #" "action": "resubscribe"}}"#))
        #expect(resubscribe.kind == .resubscribe && resubscribe.id == nil)
    }

    @Test func fromFCMData() throws {
        let preview = try ENSPush(userInfo: ["notificationId": Self.id, "userid": "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab",
                                             "id": Self.id, "ts": "1764081234567", "badge": "3", "sound": "default"],
                                  notificationTitle: "Ann Example", notificationBody: "Lunch?")
        #expect(preview.previewContent == ENSNotificationContent(sender: "Ann Example", subject: "Lunch?", badge: 3))
        #expect(preview.timestamp == 1_764_081_234_567)
        let encrypted = try ENSPush(userInfo: ["notificationId": Self.id, "privacy": "encrypted", "tag": "Ab3dEf6hIj9kLm0n", "id": Self.id,
                                               "ts": "1764081234567", "enc": "AQID"])
        #expect(encrypted.mode == .encrypted && encrypted.encryptedContent == Data([1, 2, 3]))
        let resubscribe = try ENSPush(userInfo: ["action": "resubscribe",
                                                 "userid": "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab",
                                                 "notificationId": Self.id])
        #expect(resubscribe.kind == .resubscribe && resubscribe.id == Self.id)
    }

    /// The blind member: an object for APNs, a JSON string for FCM; the vector opens
    /// through the push (BlindTests has the rest).
    @Test func blindFromBothServices() throws {
        let vectors = try Vectors.json("blind")
        var object = try #require(vectors["good"] as? [String: Any])
        object["id"] = "AAMkAGI2TG93AAA="
        let key = try ENSBlindKey(pemRepresentation: try #require(vectors["device_private_key_pem"] as? String))
        let apns = try ENSPush(userInfo: ["aps": ["alert": ["title": "New mail", "body": ""], "mutable-content": 1],
                                          "ens": ["tag": "Ab3dEf6hIj9kLm0n", "id": Self.id,
                                                  "ts": 1_764_081_234_567, "privacy": "blind", "blind": object]])
        #expect(apns.blind?.messageID == "AAMkAGI2TG93AAA=")
        #expect(try apns.blindContent(with: key).subject == "Quarterly numbers — déjà vu")
        let text = String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
        let fcm = try ENSPush(userInfo: ["notificationId": Self.id, "tag": "Ab3dEf6hIj9kLm0n", "id": Self.id, "privacy": "blind", "blind": text])
        #expect(try fcm.blindContent(with: key).sender == "Bea Finance")
        #expect(throws: ENSPushError.doesNotOpen) { try fcm.blindContent(with: try ENSBlindKey()) }
    }

    @Test func whatENSNeverSendsIsRefused() throws {
        #expect(throws: ENSPushError.notENS) { try ENSPush(userInfo: ["aps": ["alert": "Hello"]]) }
        #expect(throws: ENSPushError.notENS) { try ENSPush(userInfo: ["from": "someone else"]) }
        let base: [String: Any] = ["tag": "Ab3dEf6hIj9kLm0n", "id": Self.id, "ts": 1_764_081_234_567]
        for (change, field) in [(["privacy": "loud"], "privacy"), (["id": "not hex"], "id"), (["ts": "soon"], "ts"),
                                (["enc": "%%%"], "enc"), (["action": "explode"], "action"), (["userid": "abc"], "userid"),
                                (["privacy": "encrypted"],
                                 "encrypted without enc"), (["blind": ["data": "x"]], "blind")] as [([String: Any], String)] {
            let ens = base.merging(change) { _, new in new }
            #expect(throws: ENSPushError.malformed(field)) { try ENSPush(userInfo: ["aps": ["content-available": 1], "ens": ens]) }
        }
        #expect(throws: ENSPushError.malformed("neither tag nor userid")) {
            try ENSPush(userInfo: ["aps": ["content-available": 1], "ens": ["id": Self.id]])
        }
        #expect(throws: ENSPushError.malformed("badge")) {
            try ENSPush(userInfo: ["aps": ["badge": "many"], "ens": base])
        }
    }
}
