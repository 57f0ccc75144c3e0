import Codecs
import Curl
import Foundation
import MariaDB
import POSIX
import Testing

/// Private notifications end to end (docs/privacy.md): each privacy mode through nginx,
/// Exchange's new mail and ens-sender to the APNs and FCM simulators, what the push
/// services receive in each mode, `encrypted` previews opened by Python's
/// `cryptography` (an implementation independent of ENS's), `secure` content fetched
/// once, the history, the operator's floor, and check-ins against the server's time.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct PrivateNotificationTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("privacy-tests"))
        database = try TestStack.serviceConnection()
    }

    // MARK: Helpers

    /// A device key pair made by Python's `cryptography`: the private scalar (hex, for
    /// decrypting with the same library) and the public point as the device sends it
    /// (base64 of the 65-byte uncompressed point, or of the DER SubjectPublicKeyInfo).
    struct DeviceKey {
        let scalarHex: String
        let pointBase64: String
        let spkiBase64: String

        static func make() throws -> DeviceKey {
            let output = try TestStack.run("/usr/bin/env", ["python3", "-c", """
                import base64
                from cryptography.hazmat.primitives.asymmetric import ec
                from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
                key = ec.generate_private_key(ec.SECP256R1())
                public = key.public_key()
                print(format(key.private_numbers().private_value, "064x"))
                print(base64.b64encode(public.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)).decode())
                print(base64.b64encode(public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)).decode())
                """]).split(separator: "\n").map(String.init)
            try #require(output.count == 3)
            return DeviceKey(scalarHex: output[0], pointBase64: output[1], spkiBase64: output[2])
        }

        /// The content of an `ens.enc`, opened by tools/preview_encryption.py (Python's
        /// `cryptography`); nil if it does not open.
        func open(_ enc: String, notificationID: String) throws -> [String: Any]? {
            let blob = Hex.encode(Array(try #require(Data(base64Encoded: enc))))
            let output = try TestStack.run("/usr/bin/env",
                ["python3", TestStack.root + "/Tests/tools/preview_encryption.py", "decrypt", scalarHex, notificationID, blob])
            // A JSON list: the plaintext in hex, or null when the blob does not open.
            let opened = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [Any]
            guard let hex = opened?.first as? String, let bytes = Hex.decode(hex) else { return nil }
            return try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        }
    }

    /// A unique, recognisable mail: its sender and subject are remembered as secrets
    /// only private-mode devices receive.
    struct PrivateMail {
        let sender = "Private Sender \(UUID().uuidString.prefix(8))"
        let subject = "Private subject \(UUID().uuidString.prefix(12))"

        init() {
            TestSecrets.rememberPrivate(sender)
            TestSecrets.rememberPrivate(subject)
        }
    }

    static func text(_ value: Any) -> String {
        (try? String(decoding: JSONSerialization.data(withJSONObject: value), as: UTF8.self)) ?? ""
    }

    func apnsPush(to token: String, where matches: (APNsSimulator.Accepted) -> Bool = { _ in true }) -> APNsSimulator.Accepted? {
        APNsSimulator.accepted().last { $0.token == token && matches($0) }
    }

    func ens(_ push: APNsSimulator.Accepted) -> [String: Any] { push.payload["ens"] as? [String: Any] ?? [:] }
    /// `ens.ts`, the server's time in the push (JSONSerialization gives an NSNumber).
    func ts(_ push: APNsSimulator.Accepted) -> Int64? { (ens(push)["ts"] as? NSNumber)?.int64Value }
    func aps(_ push: APNsSimulator.Accepted) -> [String: Any] { push.payload["aps"] as? [String: Any] ?? [:] }
    func alert(_ push: APNsSimulator.Accepted) -> [String: String] { aps(push)["alert"] as? [String: String] ?? [:] }

    /// A private-notification operation as the device makes it: `info` bound to its
    /// endpoint and time, with the device's own secret beside its push token.
    func sealed(_ user: RegisteredUser, _ path: String, _ info: [String: Any]) throws -> HTTPResponse {
        var proved = info
        let token = (info["pushToken"] as? String) ?? (info["apnsToken"] as? String) ?? (info["fcmToken"] as? String).map { "fcm:" + $0 }
        if proved["deviceSecret"] == nil, let token {
            proved["deviceSecret"] = TestSecrets.deviceSecret(for: token)
        }
        return try api.call(path, ["userid": user.user.userID, "info": try user.user.sealJSON(proved, for: "\(path.dropFirst()).info")])
    }

    func object(_ response: HTTPResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
    }

    func setSyncKey(_ user: RegisteredUser, token: String, field: String = "apnsToken") throws -> String {
        let key = "sync-\(UUID().uuidString)"
        TestSecrets.rememberPrivate(key)
        let answer = try sealed(user, "/updatesynckey", [field: token, "backgroundSyncKey": key, "syncKeyExpirationTime": "12/31/2099 00:00:00.000"])
        try #require(answer.json["responseCode"] == "UpdateSuccess", "\(answer.bodyText)")
        return key
    }

    // MARK: The modes

    /// One mail to a user whose devices are `generic` (changed by /updateprivacy),
    /// `encrypted` and `secure`: no push carries the sender, subject or sync key in
    /// clear (the secret scan checks the simulators' records for them as well); the
    /// encrypted preview opens with the device's key in Python and holds all three; the
    /// secure content is fetched once, by its own device only.
    @Test func noPrivateModeShowsTheMailToThePushService() throws {
        let user = try RegisteredUser.register(with: api)
        let changed = try sealed(user, "/updateprivacy", ["pushToken": user.token, "privacy": "generic"])
        #expect(changed.json["responseCode"] == "UpdateSuccess" && changed.json["privacy"] == "generic", "\(changed.bodyText)")
        let key = try DeviceKey.make()
        let encryptedToken = TestSecrets.apnsToken()
        let registered = try user.register(with: api, token: encryptedToken, extra: ["privacy": "encrypted", "privacyKey": key.pointBase64])
        #expect(registered.json["responseCode"] == "UserUpdated" && registered.json["privacy"] == "encrypted", "\(registered.bodyText)")
        let secureToken = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: secureToken, extra: ["privacy": "secure"]).json["privacy"] == "secure")
        let syncKeys = try [user.token, encryptedToken, secureToken].map { try setSyncKey(user, token: $0) }

        let mail = PrivateMail()
        _ = try ExchangeSimulator.newMail(user.user.email, subject: mail.subject, fromName: mail.sender)
        let tokens = [user.token, encryptedToken, secureToken]
        #expect(TestStack.eventually(within: 20) { tokens.allSatisfy { apnsPush(to: $0) != nil } })
        let generic = try #require(apnsPush(to: user.token))
        let encrypted = try #require(apnsPush(to: encryptedToken))
        let secure = try #require(apnsPush(to: secureToken))
        for (push, mode) in [(generic, "generic"), (encrypted, "encrypted"), (secure, "secure")] {
            let text = Self.text(push.payload)
            #expect(!text.contains(mail.sender) && !text.contains(mail.subject), "\(mode) shows the mail")
            #expect(syncKeys.allSatisfy { !text.contains($0) }, "\(mode) shows a sync key")
            #expect(alert(push)["title"] == "New mail")
            #expect(ens(push)["privacy"] as? String == mode)
            #expect(ens(push)["id"] as? String == push.collapseID)
            let time = try #require(ts(push))
            #expect(abs(time - Int64(Date().timeIntervalSince1970 * 1000)) < 60_000)
            #expect(((aps(push)["mutable-content"] as? NSNumber)?.intValue == 1) == (mode != "generic"))
        }
        #expect(ens(secure)["enc"] == nil && aps(secure)["badge"] == nil)

        // The encrypted preview, opened by Python with the device's key.
        let encryptedID = try #require(ens(encrypted)["id"] as? String)
        let enc = try #require(ens(encrypted)["enc"] as? String)
        let content = try #require(try key.open(enc, notificationID: encryptedID))
        #expect(content["sender"] as? String == mail.sender && content["subject"] as? String == mail.subject)
        #expect(content["backgroundSyncKey"] as? String == syncKeys[1])
        // Bound to its notification: under another id it does not open.
        #expect(try key.open(enc, notificationID: String(repeating: "0", count: 32)) == nil)

        // The secure content: fetched by another device of the same user, nothing; by its
        // own device, everything, once.
        let secureID = try #require(ens(secure)["id"] as? String)
        let byOther = try sealed(user, "/getnotification", ["pushToken": encryptedToken, "id": secureID])
        let fetched = try sealed(user, "/getnotification", ["pushToken": secureToken, "id": secureID])
        #expect(object(fetched)["responseCode"] as? String == "NotificationFound", "\(fetched.bodyText)")
        let fetchedContent = try #require(object(fetched)["content"] as? [String: Any])
        #expect(fetchedContent["sender"] as? String == mail.sender && fetchedContent["subject"] as? String == mail.subject)
        #expect(fetchedContent["backgroundSyncKey"] as? String == syncKeys[2])
        let again = try sealed(user, "/getnotification", ["pushToken": secureToken, "id": secureID])
        let never = try sealed(user, "/getnotification", ["pushToken": secureToken, "id": String(repeating: "ab", count: 16)])
        for refused in [byOther, again, never] {
            #expect(refused.status == 200 && refused.bodyText == #"{"responseCode":"NotificationNotFound"}"#, "\(refused.bodyText)")
        }
    }

    /// A device whose push token changed (/updatedevice, old and new) keeps its privacy:
    /// an `encrypted` device stays encrypted to its key, and a `secure` one keeps its
    /// unfetched content and its history, even when the new token had a row of its own.
    /// (Before, the merge dropped the mode and the key: the device fell back to
    /// `preview`, and Apple saw the next subject in clear.)
    @Test func aChangedPushTokenKeepsThePrivacyModeContentAndHistory() throws {
        let user = try RegisteredUser.register(with: api)
        // The user's first device must not be sent these private mails in clear (the
        // secret scan checks every push the simulators accepted).
        #expect(try sealed(user, "/updateprivacy", ["pushToken": user.token, "privacy": "generic"]).json["responseCode"] == "UpdateSuccess")
        let key = try DeviceKey.make()
        let oldToken = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: oldToken,
                                  extra: ["privacy": "encrypted", "privacyKey": key.pointBase64]).json["privacy"] == "encrypted")
        let secureToken = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: secureToken, extra: ["privacy": "secure"]).json["privacy"] == "secure")
        let mail = PrivateMail()
        _ = try ExchangeSimulator.newMail(user.user.email, subject: mail.subject, fromName: mail.sender)
        #expect(TestStack.eventually(within: 20) { apnsPush(to: secureToken) != nil && apnsPush(to: oldToken) != nil })
        let secureID = try #require(apnsPush(to: secureToken).flatMap { ens($0)["id"] as? String })

        // Both devices get new tokens; each new token was already registered on its own
        // (in `preview`, by the same phone: with the same secret), the case whose merge
        // lost everything.
        let newEncrypted = TestSecrets.apnsToken()
        let newSecure = TestSecrets.apnsToken()
        for (old, new) in [(oldToken, newEncrypted), (secureToken, newSecure)] {
            var creds = user.creds(token: new)
            creds["deviceSecret"] = TestSecrets.deviceSecret(for: old)
            #expect(try user.register(with: api, token: new, creds: creds).json["responseCode"] == "UserUpdated")
            let sealed = try user.user.sealForDevice(["oldApnsToken": old, "apnsToken": new], token: old, for: "updatedevice.token")
            #expect(try api.call("/updatedevice", ["userid": user.user.userID, "token": sealed]).json["responseCode"] == "UpdateSuccess")
        }
        // The secure device's unfetched content and history are there under its new
        // token; its secret is still the one it registered (it stays with the device).
        let secret = TestSecrets.deviceSecret(for: secureToken)
        let history = object(try sealed(user, "/getnotificationhistory", ["pushToken": newSecure, "deviceSecret": secret]))
        let entries = history["notifications"] as? [[String: Any]] ?? []
        #expect(entries.contains { $0["id"] as? String == secureID && $0["subject"] as? String == mail.subject }, "\(history)")
        let fetched = try sealed(user, "/getnotification", ["pushToken": newSecure, "id": secureID, "deviceSecret": secret])
        #expect(object(fetched)["responseCode"] as? String == "NotificationFound", "\(fetched.bodyText)")

        // The next mail: still encrypted to the same key, still secure.
        let next = PrivateMail()
        _ = try ExchangeSimulator.newMail(user.user.email, subject: next.subject, fromName: next.sender)
        #expect(TestStack.eventually(within: 20) { apnsPush(to: newEncrypted) != nil && apnsPush(to: newSecure) != nil })
        let encrypted = try #require(apnsPush(to: newEncrypted))
        let secure = try #require(apnsPush(to: newSecure))
        #expect(ens(encrypted)["privacy"] as? String == "encrypted" && ens(secure)["privacy"] as? String == "secure")
        for push in [encrypted, secure] { #expect(!Self.text(push.payload).contains(next.subject)) }
        let id = try #require(ens(encrypted)["id"] as? String)
        let opened = try key.open(try #require(ens(encrypted)["enc"] as? String), notificationID: id)
        #expect(opened?["subject"] as? String == next.subject)
    }

    /// Unfetched content expires: after privacy.fetch_ttl_seconds the answer is the
    /// same as for an id that never existed, and `ens-cron reap` erases it.
    @Test func secureContentExpires() throws {
        let user = try RegisteredUser.register(with: api)
        #expect(try sealed(user, "/updateprivacy", ["pushToken": user.token, "privacy": "secure"]).json["responseCode"] == "UpdateSuccess")
        let mail = PrivateMail()
        _ = try ExchangeSimulator.newMail(user.user.email, subject: mail.subject, fromName: mail.sender)
        #expect(TestStack.eventually(within: 20) { apnsPush(to: user.token) != nil })
        let push = try #require(apnsPush(to: user.token))
        let id = try #require(ens(push)["id"] as? String)
        try database.execute("UPDATE NotificationLog SET content_expires_at = NOW(3) - INTERVAL 1 SECOND WHERE id = UNHEX(\(id))")
        let expired = try sealed(user, "/getnotification", ["pushToken": user.token, "id": id])
        #expect(expired.bodyText == #"{"responseCode":"NotificationNotFound"}"#)
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["reap", "--config", TestStack.directory + "/ens.conf"])
        let row = try database.queryOne("SELECT content_sealed IS NULL FROM NotificationLog WHERE id = UNHEX(\(id))")
        let erased: Bool? = try row.map { try $0.decode(Bool.self) }
        #expect(erased == true, "the reaper erased the expired content")
        // An entry past history.retention_hours (72 h here) goes entirely.
        try database.execute("UPDATE NotificationLog SET created_at = NOW(3) - INTERVAL 73 HOUR WHERE id = UNHEX(\(id))")
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["reap", "--config", TestStack.directory + "/ens.conf"])
        #expect(try database.queryOne("SELECT 1 FROM NotificationLog WHERE id = UNHEX(\(id))") == nil, "the reaper removed the old entry")
    }

    /// Android devices in each private mode: `generic` is a notification that says
    /// "New mail"; `encrypted` and `secure` are high-priority data-only messages (the
    /// app shows them once decrypted or fetched); none has anything of the mail in clear.
    @Test func androidDevicesInEachPrivateModeShowNothingToFCM() throws {
        let user = try RegisteredUser.register(with: api)
        #expect(try sealed(user, "/updateprivacy", ["pushToken": user.token, "privacy": "secure"]).json["responseCode"] == "UpdateSuccess")
        let key = try DeviceKey.make()
        var devices: [(mode: String, token: String, syncKey: String)] = []
        for (mode, extra) in [("generic", ["privacy": "generic"]), ("encrypted", ["privacy": "encrypted", "privacyKey": key.spkiBase64]),
                              ("secure", ["privacy": "secure"])] {
            let token = TestSecrets.fcmToken()
            let creds: [String: Any] = ["fcmToken": token, "userName": user.user.email, "password": user.password]
            let answer = try user.register(with: api, token: token, creds: creds, extra: extra)
            #expect(answer.json["privacy"] == mode, "\(answer.bodyText)")
            devices.append((mode, token, try setSyncKey(user, token: token, field: "fcmToken")))
        }
        let mail = PrivateMail()
        _ = try ExchangeSimulator.newMail(user.user.email, subject: mail.subject, fromName: mail.sender)
        #expect(TestStack.eventually(within: 20) { devices.allSatisfy { device in FCMSimulator.accepted().contains { $0.token == device.token } } })
        for device in devices {
            let push = try #require(FCMSimulator.accepted().last { $0.token == device.token })
            let text = Self.text(push.message)
            #expect(!text.contains(mail.sender) && !text.contains(mail.subject) && !text.contains(device.syncKey), "\(device.mode)")
            #expect(push.android["priority"] as? String == "HIGH")
            #expect(push.data["privacy"] == device.mode && push.data["id"] == push.collapseKey && push.data["ts"] != nil)
            if device.mode == "generic" {
                #expect(push.notification == ["title": "New mail", "body": ""])
            } else {
                #expect(push.message["notification"] == nil, "\(device.mode): data only, the app shows it")
            }
            #expect((push.data["enc"] != nil) == (device.mode == "encrypted"))
        }
        let encrypted = try #require(FCMSimulator.accepted().last { $0.token == devices[1].token })
        let enc = try #require(encrypted.data["enc"])
        let collapseKey = try #require(encrypted.collapseKey)
        let content = try #require(try key.open(enc, notificationID: collapseKey))
        #expect(content["subject"] as? String == mail.subject && content["backgroundSyncKey"] as? String == devices[1].syncKey)
        // The secure Android device fetches its content with its `fcm:` token.
        let secure = try #require(FCMSimulator.accepted().last { $0.token == devices[2].token })
        let fetched = try sealed(user, "/getnotification", ["pushToken": "fcm:" + devices[2].token, "id": try #require(secure.collapseKey)])
        #expect(((object(fetched)["content"] as? [String: Any])?["sender"] as? String) == mail.sender, "\(fetched.bodyText)")
    }

    /// The operator's floor (privacy.minimum_mode, applied by a reload): a `preview`
    /// device gets `generic` pushes while it is set, and its own mode again after.
    @Test func theOperatorsFloorRaisesEveryDevice() throws {
        let original = try String(contentsOfFile: TestStack.configPath, encoding: .utf8)
        func reload(_ text: String) throws { #expect(try TestStack.reloadResponders(with: text, applied: "")) }
        defer { _ = try? TestStack.reloadResponders(with: original) }
        let user = try RegisteredUser.register(with: api)
        try reload(original + "\nprivacy.minimum_mode = generic\n")
        // A device asking for less hears what it gets.
        let asked = try sealed(user, "/updateprivacy", ["pushToken": user.token, "privacy": "preview"])
        #expect(asked.json["privacy"] == "generic", "\(asked.bodyText)")
        let mail = PrivateMail()
        _ = try ExchangeSimulator.newMail(user.user.email, subject: mail.subject, fromName: mail.sender)
        #expect(TestStack.eventually(within: 20) { apnsPush(to: user.token) != nil })
        let floored = try #require(apnsPush(to: user.token))
        #expect(alert(floored)["title"] == "New mail" && ens(floored)["privacy"] as? String == "generic")

        try reload(original)
        _ = try ExchangeSimulator.newMail(user.user.email, subject: "Open again", fromName: "Ann Example")
        #expect(TestStack.eventually(within: 20) { apnsPush(to: user.token) { alert($0)["body"] == "Open again" } != nil })
    }

    // MARK: History and check-ins

    /// The history lists the device's notifications newest first with sender and
    /// subject, marks them read, survives a restart of the responders, and goes with the
    /// device when it unregisters.
    @Test func historyListsMarksSurvivesARestartAndGoesWithTheDevice() throws {
        let user = try RegisteredUser.register(with: api)
        let subjects = ["History one", "History two", "History three"]
        for subject in subjects {
            #expect(try user.mailReaches(user.token, subject: subject))
        }
        func list(limit: Int? = nil) throws -> [[String: Any]] {
            var info: [String: Any] = ["pushToken": user.token]
            if let limit { info["limit"] = limit }
            let answer = try sealed(user, "/getnotificationhistory", info)
            #expect(object(answer)["responseCode"] as? String == "NotificationHistory", "\(answer.bodyText)")
            return object(answer)["notifications"] as? [[String: Any]] ?? []
        }
        let listed = try list()
        #expect(listed.map { $0["subject"] as? String } == subjects.reversed())
        #expect(listed.allSatisfy { $0["sender"] as? String == "Ann Example" && ($0["read"] as? NSNumber)?.intValue == 0 })
        #expect(try list(limit: 2).count == 2)
        let ids = listed.prefix(2).compactMap { $0["id"] as? String }
        // Another device of the same user (registered after the mail) sees none of it and
        // cannot mark it: a device's history is its own.
        let other = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: other).json["responseCode"] == "UserUpdated")
        let othersList = try sealed(user, "/getnotificationhistory", ["pushToken": other])
        #expect((object(othersList)["notifications"] as? [Any])?.isEmpty == true, "\(othersList.bodyText)")
        let othersMark = try sealed(user, "/marknotificationsread", ["pushToken": other, "ids": ids])
        #expect((object(othersMark)["marked"] as? NSNumber)?.intValue == 0, "\(othersMark.bodyText)")
        let marked = try sealed(user, "/marknotificationsread", ["pushToken": user.token, "ids": ids + [String(repeating: "0", count: 32)]])
        #expect(object(marked)["responseCode"] as? String == "UpdateSuccess" && (object(marked)["marked"] as? NSNumber)?.intValue == 2,
                "\(marked.bodyText)")

        try TestStack.stack("fcgi-stop")
        try TestStack.stack("fcgi-start")
        #expect(TestStack.eventually(within: 20) { (try? TestStack.get("/alive").status) == 200 })
        #expect(try list().map { ($0["read"] as? NSNumber)?.intValue } == [1, 1, 0], "the history outlives the responders")

        let deviceIDs = try listed.compactMap { $0["id"] as? String }.map { id in
            try database.queryOne("SELECT device_id FROM NotificationLog WHERE id = UNHEX(\(id))")?.decode(Int64.self)
        }
        #expect(deviceIDs.allSatisfy { $0 != nil })
        let unregistered = try api.call("/unregister", ["userid": user.user.userID,
                                                        "token": try user.user.sealForDevice(["apnsToken": user.token],
                                                                                             token: user.token, for: "unregister.token")])
        #expect(unregistered.json["responseCode"] == "DeviceUnregistered")
        let left = try database.queryOne("SELECT COUNT(*) FROM NotificationLog WHERE device_id IN (\(list: deviceIDs.compactMap { $0 }))")
        let count: Int64? = try left.map { try $0.decode(Int64.self) }
        #expect(count == 0, "unregister erased the history")
    }

    /// A mail whose subject runs to kilobytes (anyone can send one) reaches the device
    /// and its history, the subject cut; uncut, its history entry did not fit its
    /// column and the callback failed at every redelivery.
    @Test func aMailWithAHugeSubjectIsPushedAndListed() throws {
        let user = try RegisteredUser.register(with: api)
        let subject = "Huge " + String(repeating: "subject ", count: 500)
        _ = try ExchangeSimulator.newMail(user.user.email, subject: subject, fromName: "Ann Example")
        #expect(TestStack.eventually(within: 20) { apnsPush(to: user.token) != nil }, "pushed")
        let push = try #require(apnsPush(to: user.token))
        #expect(try TestStack.logRowsWritten(for: [push]), "its history entry written")
        let listed = object(try sealed(user, "/getnotificationhistory", ["pushToken": user.token]))["notifications"] as? [[String: Any]] ?? []
        let entry = try #require(listed.first)
        let cut = try #require(entry["subject"] as? String)
        #expect(cut.hasSuffix("…") && subject.hasPrefix(String(cut.dropLast())) && cut.utf8.count > 1500, "\(cut.utf8.count) bytes")
    }

    /// A check-in that echoes the `ens.ts` of the newest push it has is compared with
    /// the server's own time, whatever the device's clock says (an hour fast or slow).
    @Test func checkInsCompareTheServersTimestamps() throws {
        let user = try RegisteredUser.register(with: api)
        #expect(try user.mailReaches(user.token, subject: "Clock check"))
        let push = try #require(apnsPush(to: user.token) { alert($0)["body"] == "Clock check" })
        let serverTime = try #require(ts(push))
        func checkIn(lastNotificationTs: Int64, deviceClockOffset: TimeInterval) throws -> String? {
            let formatter = DateFormatter()
            formatter.dateFormat = "MM/dd/yyyy HH:mm:ss.SSS"
            formatter.timeZone = TimeZone(identifier: "UTC")
            let deviceDate = formatter.string(from: Date().addingTimeInterval(deviceClockOffset))
            return try api.call("/getsubscriptionstatusv2", [
                "userid": user.user.userID,
                "subscriptionPayload": try user.user.sealJSON([
                    "pushToken": user.token, "lastNotificationTs": lastNotificationTs, "lastMessageDate": deviceDate,
                ]),
            ]).json["responseCode"]
        }
        for offset in [-3600.0, 3600.0] {
            #expect(try checkIn(lastNotificationTs: serverTime, deviceClockOffset: offset) == "UserSubscribed", "clock off by \(offset) s")
            #expect(try checkIn(lastNotificationTs: serverTime - 1, deviceClockOffset: offset) == "UserRecordPresentNotSubscribed",
                    "a newer push than the device has was sent")
        }
    }

    // MARK: Bad input

    /// Every malformed privacy request is a clear 400 and changes nothing; the endpoints
    /// refuse what is not a notification id or too many of them.
    @Test func malformedPrivacyRequestsAreRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let token = TestSecrets.apnsToken()
        let notOnCurve = Data([0x04] + [UInt8](repeating: 1, count: 64)).base64EncodedString()
        for extra in [["privacy": "bogus"], ["privacy": "encrypted"], ["privacy": "encrypted", "privacyKey": "not base64!"],
                      ["privacy": "encrypted", "privacyKey": notOnCurve], ["privacy": "generic", "privacyKey": notOnCurve],
                      ["privacyKey": notOnCurve]] {
            let answer = try user.register(with: api, token: token, extra: extra)
            #expect(answer.status == 400 && answer.json["responseCode"] == "InvalidRequest", "\(extra): \(answer.bodyText)")
            #expect(!(answer.json["message"] ?? "").contains(notOnCurve))
        }
        #expect(try user.register(with: api, token: token, extra: [:]).json["responseCode"] == "UserUpdated", "nothing was added before")
        let unknown = try sealed(user, "/updateprivacy", ["pushToken": TestSecrets.apnsToken(), "privacy": "secure"])
        #expect(unknown.json["responseCode"] == "UpdateFail")
        let noMode = try sealed(user, "/updateprivacy", ["pushToken": token])
        #expect(noMode.status == 400)
        let tooMany = try sealed(user, "/marknotificationsread", ["pushToken": token, "ids": (0..<26).map { _ in String(repeating: "a", count: 32) }])
        #expect(tooMany.status == 400, "\(tooMany.bodyText)")
        let notAnID = try sealed(user, "/getnotification", ["pushToken": token, "id": "../../etc/passwd"])
        #expect(notAnID.bodyText == #"{"responseCode":"NotificationNotFound"}"#)
        let badLimit = try sealed(user, "/getnotificationhistory", ["pushToken": token, "limit": -1])
        #expect(badLimit.status == 400)
    }
}
