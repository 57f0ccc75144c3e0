import Curl
@testable import ENSModel
@testable import ENSVault
@testable import SenderWire
@testable import ENSSender
import Foundation
import MariaDB
import POSIX
import Testing

/// Android devices end to end: registration with an FCM token, Exchange's new mail
/// through ens-sender to the FCM simulator (HTTP/2, OAuth token endpoint, Google's
/// message rules), mixed with APNs devices, and Google's answers.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct FCMTests {
    let api: DeviceClient
    let database: Connection
    let sender = SenderClient(socketPath: TestStack.directory + "/run/apns.sock")

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("fcm-tests"))
        database = try TestStack.serviceConnection()
        try FCMSimulator.reset()
    }

    func androidCreds(_ user: RegisteredUser, token: String) -> [String: Any] {
        ["fcmToken": token, "userName": user.user.email, "password": user.password]
    }

    func pushes(to token: String, subject: String) -> [FCMSimulator.Accepted] {
        FCMSimulator.accepted().filter { $0.token == token && $0.notification["body"] == subject }
    }

    func deviceRow(_ user: RegisteredUser, token: DeviceToken) throws -> Int64 {
        let vault = Vault(masterKey: try TestStack.masterKey())
        return try #require(try database.queryOne("""
            SELECT d.id FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.user.userID) AND d.token_hash = \(vault.tokenHash(token))
            """)?.decode(Int64.self))
    }

    @Test func anAndroidDeviceRegistersAndReceivesNewMail() throws {
        let user = try RegisteredUser.register(with: api)
        let token = TestSecrets.fcmToken()
        let answer = try user.register(with: api, token: token, creds: androidCreds(user, token: token))
        #expect(answer.json["responseCode"] == "UserUpdated", "\(answer.status) \(answer.bodyText)")
        _ = try ExchangeSimulator.newMail(user.user.email, subject: "Android lunch", fromName: "Ann Example")
        #expect(TestStack.eventually(within: 20) { !pushes(to: token, subject: "Android lunch").isEmpty })
        let push = try #require(pushes(to: token, subject: "Android lunch").first)
        #expect(push.notification["title"] == "Ann Example")
        #expect(push.android["priority"] as? String == "HIGH")
        #expect((push.android["ttl"] as? String)?.hasSuffix("s") == true)
        #expect(push.collapseKey?.count == 32 && push.data["notificationId"] == push.collapseKey)
        #expect(push.data["userid"] == user.user.userID)
        // The device's check-in finds it by its token in `fcm:` form.
        let status = try api.call("/getsubscriptionstatusv2", [
            "userid": user.user.userID,
            "subscriptionPayload": try user.user.sealJSON(["pushToken": "fcm:" + token, "ignoreLastMessageDate": 1]),
        ])
        #expect(status.json["responseCode"] == "UserSubscribed")
        // The same token registered again is the same device.
        #expect(try user.register(with: api, token: token, creds: androidCreds(user, token: token)).json["responseCode"] == "UserAlreadySubscribed")
    }

    @Test func oneUserWithAnIPhoneAndAnAndroidGetsMailOnBoth() throws {
        let user = try RegisteredUser.register(with: api)  // an iPhone: user.token
        let android = TestSecrets.fcmToken()
        #expect(try user.register(with: api, token: android, creds: androidCreds(user, token: android)).json["responseCode"] == "UserUpdated")
        _ = try ExchangeSimulator.newMail(user.user.email, subject: "Both phones", fromName: "Ann Example")
        #expect(TestStack.eventually(within: 20) { !pushes(to: android, subject: "Both phones").isEmpty })
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "Both phones").isEmpty })
        // Each got it once, on its own service.
        #expect(pushes(to: android, subject: "Both phones").count == 1)
        #expect(FCMSimulator.accepted().allSatisfy { $0.token != user.token })
        // Unregistering the Android device leaves the iPhone (and the record). The
        // Android had supplied the credentials in use (its join's were taken at the
        // last callback), and they leave with it: the iPhone's check-in asks it to
        // register again, which supplies its own.
        let unregistered = try api.call("/unregister", ["userid": user.user.userID,
                                                        "token": try user.user.sealForDevice(["fcmToken": android], token: "fcm:" + android,
                                                                                             for: "unregister.token")])
        #expect(unregistered.json["responseCode"] == "DeviceUnregistered")
        let payload = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1])
        #expect(try api.call("/getsubscriptionstatusv2", ["userid": user.user.userID, "subscriptionPayload": payload])
            .json["responseCode"] == "UserRecordPresentNotSubscribed")
        #expect(try user.register(with: api, token: user.token).json["responseCode"] == "UserSubscribed")
        #expect(try user.mailReaches(user.token, subject: "Only the iPhone now"))
    }

    @Test func unregisteredDisablesTheTokenUntilANewerRegistration() throws {
        let user = try RegisteredUser.register(with: api)
        let token = TestSecrets.fcmToken()
        #expect(try user.register(with: api, token: token, creds: androidCreds(user, token: token)).json["responseCode"] == "UserUpdated")
        let row = try deviceRow(user, token: try #require(DeviceToken(fcm: token)))
        try FCMSimulator.fail(token: token, status: 404, errorCode: "UNREGISTERED")
        _ = try ExchangeSimulator.newMail(user.user.email, subject: "Gone phone", fromName: "Ann Example")
        let disabled = TestStack.eventually(within: 20) {
            (try? database.queryOne("SELECT disabled_at IS NOT NULL FROM Devices WHERE id = \(row)")?.int(0)) == 1
        }
        #expect(disabled)
        // Never retried: nothing for it was accepted, and the simulator saw one attempt.
        #expect(pushes(to: token, subject: "Gone phone").isEmpty)
        let check = { try api.call("/getsubscriptionstatusv2", [
            "userid": user.user.userID, "subscriptionPayload": try user.user.sealJSON(["pushToken": "fcm:" + token, "ignoreLastMessageDate": 1]),
        ]).json["responseCode"] }
        #expect(try check() == "UserRecordPresentNotSubscribed")

        // The app registers again (a newer registration than FCM's verdict): enabled.
        try FCMSimulator.reset()
        Thread.sleep(forTimeInterval: 0.01)
        #expect(try user.register(with: api, token: token, creds: androidCreds(user, token: token)).json["responseCode"] == "UserUpdated")
        #expect(try database.queryOne("SELECT disabled_at IS NULL FROM Devices WHERE id = \(row)")?.int(0) == 1)
        #expect(try check() == "UserSubscribed")
        _ = try ExchangeSimulator.newMail(user.user.email, subject: "Back again", fromName: "Ann Example")
        #expect(TestStack.eventually(within: 20) { !pushes(to: token, subject: "Back again").isEmpty })
    }

    static func notification(token: String, subject: String = "direct") -> PushNotification {
        PushNotification(
            id: SenderTests.id(), deviceToken: DeviceToken(fcm: token)!, topic: "com.example.android", environment: .production,
            pushType: .alert, expiration: Int64(Date().timeIntervalSince1970) + 3600,
            payload: Array(#"{"aps":{"alert":{"title":"Alice","body":"\#(subject)"}},"ens":{"userid":"abc"}}"#.utf8), deviceRowID: nil
        )
    }

    @Test func retryAfterIsHonouredAndTheAccessTokenReused() throws {
        let issuedBefore = try FCMSimulator.tokensIssued()
        let token = TestSecrets.fcmToken()
        try FCMSimulator.fail(token: token, status: 429, errorCode: "QUOTA_EXCEEDED", retryAfter: 3, count: 1)
        let submitted = Int64(Date().timeIntervalSince1970 * 1000)
        let first = Self.notification(token: token, subject: "quota")
        #expect(try sender.submit(first) == .accepted)
        #expect(TestStack.eventually(within: 20) { FCMSimulator.accepted().contains { $0.collapseKey == first.id } })
        let delivered = try #require(FCMSimulator.accepted().first { $0.collapseKey == first.id })
        // Refused at once, delivered no sooner than Retry-After (3 s) later.
        #expect(delivered.time - submitted >= 3000, "delivered after \(delivered.time - submitted) ms")

        // Transient answers are retried until delivered.
        for (status, code) in [(503, "UNAVAILABLE"), (500, "INTERNAL")] {
            let other = TestSecrets.fcmToken()
            try FCMSimulator.fail(token: other, status: status, errorCode: code, count: 1)
            let notification = Self.notification(token: other, subject: code)
            #expect(try sender.submit(notification) == .accepted)
            #expect(TestStack.eventually(within: 20) { FCMSimulator.accepted().contains { $0.collapseKey == notification.id } }, "\(code)")
        }
        // Every message of this test went out on access tokens the sender already had
        // (or one it fetched once): not one token per message.
        #expect(try FCMSimulator.tokensIssued() - issuedBefore <= 1)
    }

    @Test func aRevokedAccessTokenIsReplacedAndTheMessageRetried() throws {
        let warm = Self.notification(token: TestSecrets.fcmToken(), subject: "warm")
        #expect(try sender.submit(warm) == .accepted)
        #expect(TestStack.eventually(within: 20) { FCMSimulator.accepted().contains { $0.collapseKey == warm.id } })
        let issued = try FCMSimulator.tokensIssued()
        try FCMSimulator.control("/revoke-tokens", [:])
        let after = Self.notification(token: TestSecrets.fcmToken(), subject: "after revocation")
        #expect(try sender.submit(after) == .accepted)
        #expect(TestStack.eventually(within: 20) { FCMSimulator.accepted().contains { $0.collapseKey == after.id } })
        #expect(try FCMSimulator.tokensIssued() == issued + 1)
    }

    /// The provider on its own, against the simulator's token endpoint with a moved
    /// clock: a token is reused until five minutes before it expires, then renewed.
    @Test func theAccessTokenIsRenewedBeforeItExpires() throws {
        let account = try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: TestStack.directory
                                                                                      + "/secrets/fcm-service-account.json"))))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let clock = ManualClock(now - 56 * 60_000)  // so the first token expires 4 minutes from real now
        let provider = try FCMProvider(accounts: ["com.example.android": account], url: "https://localhost:\(Int(TestStack.port)! + 6)",
                                       caBundlePath: TestStack.certificate, clock: { clock.value })
        let notification = Self.notification(token: TestSecrets.fcmToken())
        let issued = try FCMSimulator.tokensIssued()
        let first = try provider.request(for: notification)
        #expect(try FCMSimulator.tokensIssued() == issued + 1)
        clock.value += 1000
        let second = try provider.request(for: notification)
        #expect(try FCMSimulator.tokensIssued() == issued + 1)
        #expect(first.headers.first { $0.0 == "authorization" }?.1 == second.headers.first { $0.0 == "authorization" }?.1)
        clock.value = now  // four minutes before expiry: inside the renewal margin
        let third = try provider.request(for: notification)
        #expect(try FCMSimulator.tokensIssued() == issued + 2)
        #expect(third.headers.first { $0.0 == "authorization" }?.1 != second.headers.first { $0.0 == "authorization" }?.1)
        #expect(third.url.hasSuffix("/v1/projects/ens-dev/messages:send"))
    }
}

/// A clock a test moves by hand (milliseconds since the epoch).
final class ManualClock: @unchecked Sendable {
    var value: Int64
    init(_ value: Int64) { self.value = value }
}
