internal import Curl
internal import ENSModel
import Codecs
import Foundation
import OpenSSL
import MariaDB
import Testing

/// Graph's `blind` mode end to end through nginx (docs/privacy.md): each device
/// registers the certificate of its own RSA key, Graph (the simulator, encrypting for
/// real) puts the new mail's sender and subject into the notification encrypted to
/// that certificate, and ENS forwards the ciphertext once the batch's validation
/// tokens (JWTs the simulator's identity platform signs) verify. The device side is
/// Tests/tools/graph_decrypt.py, Microsoft's documented steps in Python.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct BlindModeTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("blind-tests"))
        database = try TestStack.serviceConnection()
        try GraphSimulator.reset()
        // Each test may need one fetch of the signing keys; the once-a-minute spacing is
        // what `aRotatedSigningKeyIsFetchedOnce` checks.
        try database.execute("UPDATE GraphSigningKeys SET fetched_at = '2000-01-01' WHERE kid = ''")
    }

    /// A device's key pair and self-signed certificate, made by the Python reference.
    struct DeviceKey {
        let keyPath: String
        let certificateBase64: String

        static func make(bits: Int = 2048, days: Int = 365, ec: Bool = false) throws -> DeviceKey {
            let directory = TestStack.directory + "/blind-keys"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let name = directory + "/" + UUID().uuidString.prefix(8)
            let output = try TestStack.run("/usr/bin/env", ["python3", TestStack.root + "/Tests/tools/graph_decrypt.py", "--new-certificate",
                                                            name + ".key", name + ".crt", "--bits", "\(bits)",
                                                            "--days", "\(days)"] + (ec ? ["--ec"] : []))
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
            return DeviceKey(keyPath: name + ".key", certificateBase64: try #require(answer["encryptionCertificate"] as? String))
        }

        /// Opens `ens.blind` (or a fetched content) with this key under `certificateID`.
        func decrypt(_ blind: [String: Any]) throws -> [String: Any] {
            let input = TestStack.directory + "/blind-keys/in-" + UUID().uuidString.prefix(8) + ".json"
            try JSONSerialization.data(withJSONObject: blind).write(to: URL(fileURLWithPath: input))
            let certificateID = try #require(blind["encryptionCertificateId"] as? String)
            let output = try TestStack.run("/bin/sh",
                ["-c", "python3 '\(TestStack.root)/Tests/tools/graph_decrypt.py' --key '\(certificateID)=\(keyPath)' < '\(input)'"])
            return try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
        }
    }

    /// Registers `token` for the user in `blind` mode with `key`'s certificate.
    /// A blind registration as a client of today sends it: the mode inside the bound
    /// creds, the certificate in clear named there by its SHA-256.
    func registerBlind(_ user: GraphMailboxUser, token: String, key: DeviceKey) throws -> HTTPResponse {
        let member = token.hasPrefix("fcm:") ? "fcmToken" : "apnsToken"
        let bare = token.hasPrefix("fcm:") ? String(token.dropFirst(4)) : token
        let der = Array(Data(base64Encoded: key.certificateBase64) ?? Data())
        return try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.user.email,
            "creds": try user.user.sealJSON([member: bare, "graphAccessToken": try GraphSimulator.userToken(user.user.email),
                                             "deviceSecret": TestSecrets.deviceSecret(for: token), "privacy": "blind",
                                             "privacyCertificateSHA256": Hex.encode(Digest.sha256(der))], for: "registerdevicev2.creds"),
            "bundleid": "com.example.mail", "privacyCertificate": key.certificateBase64,
        ])
    }

    func blindPushes(to token: String) -> [[String: Any]] {
        APNsSimulator.accepted().filter { $0.token == token }.compactMap { push in
            guard let ens = push.payload["ens"] as? [String: Any], ens["privacy"] as? String == "blind" else { return nil }
            return ens
        }
    }

    /// New mail whose sender and subject only the devices may read.
    func privateMail(_ user: GraphMailboxUser, _ subject: String, fromName: String = "Blind Sender") throws -> [[String: Any]] {
        TestSecrets.rememberPrivate(subject)
        TestSecrets.rememberPrivate(fromName)
        return try GraphSimulator.newMail(user.user.email, subject: subject, fromName: fromName)
    }

    /// Waits until `token` has a blind push whose decrypted subject is `subject`.
    func decrypted(_ token: String, key: DeviceKey, subject: String) throws -> [String: Any]? {
        var found: [String: Any]?
        _ = TestStack.eventually(within: 20) {
            found = blindPushes(to: token).compactMap { $0["blind"] as? [String: Any] }.compactMap { try? key.decrypt($0) }
                .first { $0["subject"] as? String == subject }
            return found != nil
        }
        return found
    }

    // MARK: Delivery

    @Test func twoDevicesOfOneUserEachOpenTheirOwnNotificationAndENSLooksNothingUp() throws {
        let user = try GraphMailboxUser.register(with: api)
        let (keyA, keyB) = (try DeviceKey.make(), try DeviceKey.make(bits: 3072))
        let (tokenA, tokenB) = (TestSecrets.apnsToken(), TestSecrets.apnsToken())
        let answerA = try registerBlind(user, token: tokenA, key: keyA)
        #expect(answerA.json["responseCode"] == "UserUpdated" && answerA.json["privacy"] == "blind", "\(answerA.bodyText)")
        #expect(try registerBlind(user, token: tokenB, key: keyB).json["privacy"] == "blind")
        // The first device leaves `preview`, so no device of the user is looked up.
        #expect(try registerBlind(user, token: user.token, key: keyA).json["privacy"] == "blind")
        let rich = try GraphSimulator.live(of: user.user.email).filter { $0["includeResourceData"] as? Bool == true }
        #expect(rich.count == 2, "one rich subscription per certificate, shared by the devices that registered it: \(rich)")
        #expect(Set(rich.compactMap { $0["resource"] as? String }).count == 2, "Graph refuses two subscriptions with one resource")

        let deliveries = try privateMail(user, "Blind lunch at noon", fromName: "Carol Secret")
        #expect(GraphSimulator.statuses(deliveries).allSatisfy { $0 == 202 }, "\(deliveries)")
        let openedA = try #require(try decrypted(tokenA, key: keyA, subject: "Blind lunch at noon"))
        #expect(((openedA["from"] as? [String: Any])?["emailAddress"] as? [String: Any])?["name"] as? String == "Carol Secret")
        #expect(try decrypted(tokenB, key: keyB, subject: "Blind lunch at noon") != nil)
        #expect(try decrypted(user.token, key: keyA, subject: "Blind lunch at noon") != nil)
        // Each device's push opens only with its own key, which it finds by the id ENS
        // gave Graph: the first 16 bytes of its certificate's SHA-256. Graph's message
        // id (derived from the mailbox) stays inside the ciphertext.
        let pushB = try #require(blindPushes(to: tokenB).compactMap { $0["blind"] as? [String: Any] }.first)
        let derB = Array(try #require(Data(base64Encoded: keyB.certificateBase64)))
        #expect(pushB["encryptionCertificateId"] as? String == Hex.encode(Array(Digest.sha256(derB).prefix(16))))
        #expect(pushB["id"] == nil)
        #expect((try? keyA.decrypt(pushB)) == nil)
        // What Apple sees: a generic alert, mutable-content, an opaque tag, no userid.
        let push = try #require(APNsSimulator.accepted().first { $0.token == tokenA })
        let aps = try #require(push.payload["aps"] as? [String: Any])
        #expect((aps["alert"] as? [String: String])?["title"] == "New mail" && (aps["mutable-content"] as? NSNumber)?.intValue == 1)
        #expect((push.payload["ens"] as? [String: Any])?["userid"] == nil && (push.payload["ens"] as? [String: Any])?["tag"] != nil)
        let stats = try GraphSimulator.stats()
        #expect(((stats["message_gets"] as? [String: Any])?[user.user.email] as? NSNumber)?.intValue ?? 0 == 0, "ENS read no message")
        #expect(try GraphSimulator.violations().isEmpty)
    }

    @Test func anAndroidDeviceGetsTheCiphertextAsDataOnly() throws {
        let user = try GraphMailboxUser.register(with: api)
        let key = try DeviceKey.make()
        let token = TestSecrets.fcmToken()
        let answer = try registerBlind(user, token: "fcm:" + token, key: key)
        #expect(answer.json["privacy"] == "blind", "\(answer.bodyText)")
        // The user's iPhone leaves `preview` too: what is sent now is for blind devices only.
        #expect(try registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        _ = try privateMail(user, "Blind on Android")
        var opened: [String: Any]?
        #expect(TestStack.eventually(within: 20) {
            opened = FCMSimulator.accepted().filter { $0.token == token }.compactMap { $0.data["blind"] }.compactMap { text in
                (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]).flatMap { try? key.decrypt($0) }
            }.first
            return opened != nil
        })
        #expect(opened?["subject"] as? String == "Blind on Android")
        let message = try #require(FCMSimulator.accepted().first { $0.token == token })
        #expect(message.notification.isEmpty && message.data["privacy"] == "blind", "data-only: the app shows the alert once it has opened it")
    }

    @Test func aPayloadTooBigForAPushIsFetchedOnceStillEncrypted() throws {
        let user = try GraphMailboxUser.register(with: api)
        let key = try DeviceKey.make(bits: 4096)
        #expect(try registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        let subject = "Long blind subject " + String(repeating: "x", count: 3200)
        _ = try privateMail(user, subject)
        #expect(TestStack.eventually(within: 20) { !blindPushes(to: user.token).isEmpty })
        let ens = try #require(blindPushes(to: user.token).first)
        #expect(ens["blind"] == nil, "over 4 KB: the push names the notification only")
        let id = try #require(ens["id"] as? String)
        let info: [String: Any] = ["pushToken": user.token, "id": id, "deviceSecret": TestSecrets.deviceSecret(for: user.token)]
        let fetched = try api.call("/getnotification",
                                   ["userid": user.user.userID, "info": try user.user.sealJSON(info, for: "getnotification.info")])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(fetched.body)) as? [String: Any])
        let content = try #require(object["content"] as? [String: Any], "\(fetched.bodyText)")
        #expect(try key.decrypt(content)["subject"] as? String == subject)
        let again = try api.call("/getnotification", ["userid": user.user.userID, "info": try user.user.sealJSON(info, for: "getnotification.info")])
        #expect(again.json["responseCode"] == "NotificationNotFound")
    }

    // MARK: Validation tokens

    @Test func everyBadTokenDeliversNothingAndIsStillAnswered202() throws {
        let user = try GraphMailboxUser.register(with: api)
        let key = try DeviceKey.make()
        #expect(try registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        let faults = ["bad-signature", "expired", "not-yet-valid", "wrong-audience", "wrong-azp", "wrong-issuer", "missing-token", "null-token",
                      "unknown-kid"]
        for fault in faults {
            _ = try GraphSimulator.control("/mode", ["blindFault": fault])
            let deliveries = try privateMail(user, "Forged \(fault)")
            #expect(GraphSimulator.statuses(deliveries).allSatisfy { $0 == 202 }, "\(fault): \(deliveries)")
        }
        _ = try GraphSimulator.control("/mode", ["blindFault": "none"])
        _ = try privateMail(user, "Genuine after the forgeries")
        #expect(try decrypted(user.token, key: key, subject: "Genuine after the forgeries") != nil)
        let subjects = blindPushes(to: user.token).compactMap { $0["blind"] as? [String: Any] }.compactMap {
            try? key.decrypt($0)["subject"] as? String
        }
        #expect(subjects == ["Genuine after the forgeries"], "\(subjects)")
        let log = try String(contentsOfFile: TestStack.directory + "/log/ens-fcgi.log", encoding: .utf8)
        #expect(log.contains("the batch's validation tokens do not prove Graph sent it"))
    }

    @Test func tamperedDataIsForwardedButTheDeviceRefusesIt() throws {
        let user = try GraphMailboxUser.register(with: api)
        let key = try DeviceKey.make()
        #expect(try registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        _ = try GraphSimulator.control("/mode", ["blindFault": "tampered-data", "blindFaultCount": 1])
        _ = try privateMail(user, "Tampered in transit")
        #expect(TestStack.eventually(within: 20) { !blindPushes(to: user.token).isEmpty })
        let blind = try #require(blindPushes(to: user.token).first?["blind"] as? [String: Any])
        // ENS cannot tell (it cannot open the content); the device's HMAC check does.
        #expect((try? key.decrypt(blind)) == nil)
    }

    @Test func aRotatedSigningKeyIsFetchedOnceAMinuteAtMost() throws {
        let user = try GraphMailboxUser.register(with: api)
        let key = try DeviceKey.make()
        #expect(try registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        _ = try privateMail(user, "Before the key rotation")
        #expect(try decrypted(user.token, key: key, subject: "Before the key rotation") != nil)
        let before = (try GraphSimulator.stats()["jwks_fetches"] as? NSNumber)?.intValue ?? 0
        try database.execute("UPDATE GraphSigningKeys SET fetched_at = '2000-01-01' WHERE kid = ''")
        _ = try GraphSimulator.control("/signing-keys/rotate", ["keepOld": false])
        _ = try privateMail(user, "After the key rotation")
        #expect(try decrypted(user.token, key: key, subject: "After the key rotation") != nil)
        // Tokens of a key never published, right after: no second fetch within the minute.
        _ = try GraphSimulator.control("/mode", ["blindFault": "unknown-kid", "blindFaultCount": 3])
        for index in 0..<3 { _ = try privateMail(user, "Unknown key \(index)") }
        let after = (try GraphSimulator.stats()["jwks_fetches"] as? NSNumber)?.intValue ?? 0
        #expect(after - before == 1, "fetches: \(after - before)")
    }

    // MARK: Certificates

    @Test func aCertificateENSCannotUseIsRefusedWithAClearError() throws {
        let user = try GraphMailboxUser.register(with: api)
        for (key, reason, refusal) in [(try DeviceKey.make(ec: true), "RSA", "notRSA"), (try DeviceKey.make(bits: 1024), "2,048 to 4,096", "keySize"),
                                       (try DeviceKey.make(days: 0), "expired", "expiring")] {
            let answer = try registerBlind(user, token: TestSecrets.apnsToken(), key: key)
            #expect(answer.status == 400 && answer.bodyText.contains(reason), "\(answer.status) \(answer.bodyText)")
            // The machine-readable code an app acts on (since openapi 2.10).
            #expect(answer.json["refusal"] == refusal, "\(answer.bodyText)")
        }
        let garbage = try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.user.email,
            "creds": try user.user.sealJSON(["apnsToken": TestSecrets.apnsToken(),
                                             "graphAccessToken": try GraphSimulator.userToken(user.user.email)]),
            "bundleid": "com.example.mail", "privacy": "blind", "privacyCertificate": "bm90IGEgY2VydGlmaWNhdGU=",
        ])
        #expect(garbage.status == 400 && garbage.bodyText.contains("X.509") && garbage.json["refusal"] == "notX509", "\(garbage.bodyText)")
        let missing = try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.user.email,
            "creds": try user.user.sealJSON(["apnsToken": TestSecrets.apnsToken(),
                                             "graphAccessToken": try GraphSimulator.userToken(user.user.email)]),
            "bundleid": "com.example.mail", "privacy": "blind",
        ])
        #expect(missing.status == 400 && missing.bodyText.contains("privacyCertificate") && missing.json["refusal"] == "missingCertificate")
        #expect(try GraphSimulator.live(of: user.user.email).filter { $0["includeResourceData"] as? Bool == true }.isEmpty)
    }

    @Test func anExchangeMailboxCannotBeBlind() throws {
        let user = try RegisteredUser.register(with: api)
        let answer = try user.register(with: api, token: TestSecrets.apnsToken(),
                                       extra: ["privacy": "blind", "privacyCertificate": try DeviceKey.make().certificateBase64])
        #expect(answer.status == 400 && answer.bodyText.contains("Exchange Online") && answer.json["refusal"] == "notExchangeOnline",
                "\(answer.bodyText)")
    }

    // MARK: Rotation and renewal

    @Test func aCertificateRotationMidStreamLosesNothing() throws {
        let user = try GraphMailboxUser.register(with: api)
        let (oldKey, newKey) = (try DeviceKey.make(), try DeviceKey.make())
        #expect(try registerBlind(user, token: user.token, key: oldKey).json["privacy"] == "blind")
        // Made by Graph before the rotation, delivered after it.
        TestSecrets.rememberPrivate("In flight during the rotation")
        let held = try GraphSimulator.control("/newmail", ["mail": user.user.email, "subject": "In flight during the rotation", "deliver": false])
        let inFlight = try #require(held["notifications"] as? [[String: Any]]).filter {
            ($0["body"] as? String)?.contains("encryptedContent") == true
        }
        try #require(inFlight.count == 1)
        let der = try #require(Data(base64Encoded: newKey.certificateBase64))
        let info: [String: Any] = ["pushToken": user.token, "privacy": "blind", "privacyCertificateSHA256": Hex.encode(Digest.sha256(Array(der))),
                                   "deviceSecret": TestSecrets.deviceSecret(for: user.token)]
        let sealedInfo = try user.user.sealJSON(info, for: "updateprivacy.info")
        // The certificate travels beside the sealed info, which names it by its hash.
        let swapped = try api.call("/updateprivacy",
                                   ["userid": user.user.userID, "info": sealedInfo, "privacyCertificate": try DeviceKey.make().certificateBase64])
        #expect(swapped.status == 400 && swapped.bodyText.contains("SHA-256") && swapped.json["refusal"] == "hashMismatch", "\(swapped.bodyText)")
        // That refusal spent the sealed info (single-use): the device seals it again.
        let resealed = try user.user.sealJSON(info, for: "updateprivacy.info")
        let rotated = try api.call("/updateprivacy", ["userid": user.user.userID, "info": resealed, "privacyCertificate": newKey.certificateBase64])
        #expect(rotated.json["responseCode"] == "UpdateSuccess" && rotated.json["privacy"] == "blind", "\(rotated.bodyText)")
        let rich = try GraphSimulator.live(of: user.user.email).filter { $0["includeResourceData"] as? Bool == true }
        #expect(rich.count == 1, "the device's own subscription was moved to the new certificate (PATCH), not duplicated")
        // The held notification arrives now, and a new one after it.
        for notification in inFlight {
            let body = Array(try #require(notification["body"] as? String).utf8)
            let url = try #require(notification["url"] as? String)
            let path = String(url[try #require(url.range(of: "/graph/")).lowerBound...])
            let answer = try TestStack.post(path, body: body, contentType: "application/json")
            #expect(answer.status == 202)
        }
        _ = try privateMail(user, "After the rotation")
        #expect(try decrypted(user.token, key: oldKey, subject: "In flight during the rotation") != nil)
        #expect(try decrypted(user.token, key: newKey, subject: "After the rotation") != nil)
    }

    @Test func theRichSubscriptionIsRenewedBeforeItsDayRunsOut() throws {
        let user = try GraphMailboxUser.register(with: api)
        let key = try DeviceKey.make()
        #expect(try registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        let hours = try #require(try database.queryOne("""
            SELECT TIMESTAMPDIFF(MINUTE, NOW(3), b.expires_at), TIMESTAMPDIFF(MINUTE, NOW(3), b.renew_after)
            FROM GraphBlindSubscriptions b JOIN EnsSubscriptionInfo s ON s.id = b.record_id WHERE s.userid = \(user.user.userID)
            """)).decode(Int64.self, Int64.self)
        #expect(hours.0 <= 1440 && hours.0 > 1380 && hours.1 < hours.0 / 2 + 5, "\(hours)")
        try database.execute("""
            UPDATE GraphBlindSubscriptions b JOIN EnsSubscriptionInfo s ON s.id = b.record_id
            SET b.renew_after = NOW(3), b.renewed_at = NOW(3) - INTERVAL 11 MINUTE WHERE s.userid = \(user.user.userID)
            """)
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["renew", "--config", TestStack.directory + "/ens.conf"])
        let rich = try #require(try GraphSimulator.live(of: user.user.email).first { $0["includeResourceData"] as? Bool == true })
        #expect((rich["renewals"] as? NSNumber)?.intValue == 1, "\(rich)")
        // A subscription Graph removed is re-created within seconds, without ens-cron.
        _ = try GraphSimulator.control("/lifecycle", ["subscriptionId": try #require(rich["id"] as? String), "event": "subscriptionRemoved"])
        #expect(try TestStack.eventually(within: 10) {
            try GraphSimulator.live(of: user.user.email).contains { $0["includeResourceData"] as? Bool == true
                && $0["id"] as? String != rich["id"] as? String }
        })
        _ = try privateMail(user, "After the re-creation")
        #expect(try decrypted(user.token, key: key, subject: "After the re-creation") != nil)
    }
}
