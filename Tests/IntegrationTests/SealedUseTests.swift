import Curl
import Foundation
import MariaDB
import Testing

/// Sealed values serve one purpose, for a while (docs/api.md, "Sealed values"), and the
/// private-notification operations need the device's own secret, not the push token
/// Apple and Google hold (docs/privacy.md). Written as the replays and the push
/// service's tries they stop, through nginx.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct SealedUseTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("sealed-use-tests"))
        database = try TestStack.serviceConnection()
    }

    static let refused = #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#

    func checkIn(_ user: RegisteredUser, payload: String, creds: String? = nil) throws -> HTTPResponse {
        var parameters = ["userid": user.user.userID, "subscriptionPayload": payload]
        parameters["creds"] = creds
        return try api.call("/getsubscriptionstatusv2", parameters)
    }

    func freshCredentials(_ user: RegisteredUser) throws -> Int64? {
        try database.queryOne("""
            SELECT COUNT(*) FROM MailCredentialsFresh f JOIN EnsSubscriptionInfo s ON s.id = f.record_id WHERE s.userid = \(user.user.userID)
            """)?.int(0)
    }

    /// A device's check-in, seen once by a TLS-terminating proxy, replayed as `info` to
    /// the history (which lists senders and subjects): refused, bound or not.
    @Test func aSeenCheckInReplayedAsHistoryInfoIsRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let unbound = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1])
        let bound = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1], for: "getsubscriptionstatusv2.subscriptionPayload")
        for payload in [unbound, bound] {
            #expect(try checkIn(user, payload: payload).json["responseCode"] == "UserSubscribed")
            let replayed = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": payload])
            #expect(replayed.status == 400 && replayed.bodyText == Self.refused, "\(replayed.bodyText)")
        }
    }

    /// A registration's `creds` (an old password, say) replayed as a check-in's `creds`
    /// to plant credentials that lock the account: refused, nothing left for a callback.
    @Test func aRegistrationsCredsReplayedAtACheckInAreRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let seen = try user.user.sealJSON(["userName": user.user.email, "password": "an-old-password"], for: "registerdevicev2.creds")
        TestSecrets.remember("an-old-password")
        let payload = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1],
                                             for: "getsubscriptionstatusv2.subscriptionPayload")
        let answer = try checkIn(user, payload: payload, creds: seen)
        #expect(answer.status == 400 && answer.bodyText == Self.refused, "\(answer.bodyText)")
        #expect(try freshCredentials(user) == 0)
    }

    /// Outside `sealed.max_age_seconds` (900 s here) either way, and with a member its
    /// use does not list, a sealed value is refused.
    @Test func staleFutureAndPaddedValuesAreRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let object: [String: Any] = ["pushToken": user.token, "ignoreLastMessageDate": 1]
        let purpose = "getsubscriptionstatusv2.subscriptionPayload"
        #expect(try checkIn(user, payload: user.user.sealJSON(object, for: purpose, sealedAt: now - 1000)).json["responseCode"] == "UserSubscribed")
        for sealedAt in [now - 20 * 60_000, now + 20 * 60_000] {
            let answer = try checkIn(user, payload: user.user.sealJSON(object, for: purpose, sealedAt: sealedAt))
            #expect(answer.status == 400 && answer.bodyText == Self.refused)
        }
        var padded = object
        padded["privacy"] = "preview"
        #expect(try checkIn(user, payload: user.user.sealJSON(padded)).status == 400)
        // A purpose without a time, or a time without a purpose, is neither form.
        #expect(try checkIn(user, payload: user.user.sealJSON(object.merging(["purpose": purpose]) { $1 })).status == 400)
        #expect(try checkIn(user, payload: user.user.sealJSON(object.merging(["sealedAt": now]) { $1 })).status == 400)
    }

    /// The original contract's unbound forms keep working, until the operator sets
    /// sealed.require_purpose (a reload): then only bound values pass.
    @Test func theContractsUnboundFormsWorkUntilTheOperatorRequiresPurpose() throws {
        let user = try RegisteredUser.register(with: api)
        let unbound = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1])
        let bound = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1], for: "getsubscriptionstatusv2.subscriptionPayload")
        let bareToken = try user.user.seal(user.token)
        #expect(try checkIn(user, payload: unbound).json["responseCode"] == "UserSubscribed")
        let original = try String(contentsOfFile: TestStack.configPath, encoding: .utf8)
        defer { _ = try? TestStack.reloadResponders(with: original) }
        #expect(try TestStack.reloadResponders(with: original + "\nsealed.require_purpose = true\n", applied: "sealed.require_purpose"))
        #expect(try checkIn(user, payload: unbound).status == 400)
        #expect(try checkIn(user, payload: bound).json["responseCode"] == "UserSubscribed")
        // The contract's bare token (/updatedevice, /unregister) names no use: refused too.
        #expect(try api.call("/unregister", ["userid": user.user.userID, "token": bareToken]).status == 400)
        #expect(try api.call("/updatedevice", ["userid": user.user.userID, "token": bareToken]).status == 400)
        #expect(try database.queryOne("SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)")?.int(0) == 1)
    }

    /// /unregister's bound form: a token object named for /unregister works; the same
    /// object named for /updatedevice does not.
    @Test func unregisterTakesABoundTokenForItselfOnly() throws {
        let user = try RegisteredUser.register(with: api)
        let second = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        let elsewhere = try user.user.sealJSON(["apnsToken": second], for: "updatedevice.token")
        #expect(try api.call("/unregister", ["userid": user.user.userID, "token": elsewhere]).status == 400)
        let bound = try user.user.sealForDevice(["apnsToken": second], token: second, for: "unregister.token")
        #expect(try api.call("/unregister", ["userid": user.user.userID, "token": bound]).json["responseCode"] == "DeviceUnregistered")
    }

    // MARK: The push service holds the push token, not the device's secret

    /// What Apple (or Google) can try with the token it delivers to, the app's public
    /// ApiToken and the public key: read a `secure` device's content and history, mark
    /// it read, switch it back to `preview`. Each answers as for an unknown device.
    @Test func thePushTokenAloneOpensNoPrivateOperation() throws {
        let user = try RegisteredUser.register(with: api)
        // The user's first device must not get this private mail in clear either (the
        // secret scan checks every push the simulators accepted).
        let generic = try user.user.sealJSON(["pushToken": user.token,
                                              "deviceSecret": TestSecrets.deviceSecret(for: user.token), "privacy": "generic"],
                                             for: "updateprivacy.info")
        #expect(try api.call("/updateprivacy", ["userid": user.user.userID, "info": generic]).json["responseCode"] == "UpdateSuccess")
        let token = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: token, extra: ["privacy": "secure"]).json["privacy"] == "secure")
        let subject = "For the device only \(UUID().uuidString.prefix(6))"
        TestSecrets.rememberPrivate(subject)
        _ = try ExchangeSimulator.newMail(user.user.email, subject: subject, fromName: "Ann Example")
        #expect(TestStack.eventually(within: 20) { APNsSimulator.accepted().contains { $0.token == token } })
        let push = try #require(APNsSimulator.accepted().last { $0.token == token })
        let ens = try #require(push.payload["ens"] as? [String: Any])
        let id = try #require(ens["id"] as? String)
        // Nothing in the push names the mailbox: an opaque tag, not the address's hash.
        #expect(ens["userid"] == nil && (ens["tag"] as? String)?.count == 16)
        #expect(!String(decoding: try JSONSerialization.data(withJSONObject: push.payload), as: UTF8.self).contains(user.user.userID))

        let guessed = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        for secret in [nil, guessed] {
            func info(_ object: [String: Any], _ path: String) throws -> String {
                var proved = object
                proved["deviceSecret"] = secret
                return try user.user.sealJSON(proved, for: path)
            }
            let fetch = try api.call("/getnotification",
                                     ["userid": user.user.userID, "info": info(["pushToken": token, "id": id], "getnotification.info")])
            let history = try api.call("/getnotificationhistory",
                                       ["userid": user.user.userID, "info": info(["pushToken": token], "getnotificationhistory.info")])
            let mark = try api.call("/marknotificationsread",
                                    ["userid": user.user.userID, "info": info(["pushToken": token, "ids": [id]], "marknotificationsread.info")])
            let downgrade = try api.call("/updateprivacy",
                                         ["userid": user.user.userID, "info": info(["pushToken": token, "privacy": "preview"], "updateprivacy.info")])
            if secret == nil {
                for answer in [fetch, history, mark, downgrade] { #expect(answer.status == 400, "\(answer.bodyText)") }
            } else {
                #expect(fetch.bodyText == #"{"responseCode":"NotificationNotFound"}"#)
                #expect(history.bodyText == #"{"responseCode":"UserSubscriptionNotFound"}"#)
                #expect(mark.bodyText == #"{"responseCode":"UpdateFail"}"#)
                #expect(downgrade.bodyText == #"{"responseCode":"UpdateFail"}"#)
            }
            #expect(!fetch.bodyText.contains(subject) && !history.bodyText.contains(subject))
        }
        #expect(try database.queryOne("""
            SELECT d.privacy_mode FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.user.userID) AND d.privacy_mode = 3
            """) != nil, "still secure")
        // The device itself, with its secret, reads it.
        let own = try user.user.sealJSON(["pushToken": token, "id": id, "deviceSecret": TestSecrets.deviceSecret(for: token)],
                                         for: "getnotification.info")
        let fetched = try api.call("/getnotification", ["userid": user.user.userID, "info": own])
        #expect(fetched.bodyText.contains(subject), "\(fetched.bodyText)")
    }

    /// A registration without a secret (an older app) leaves the one stored; a device
    /// that never registered one cannot use the private operations until it does.
    @Test func aDeviceWithoutASecretRegistersOneToUseThePrivateOperations() throws {
        let user = try RegisteredUser.register(with: api)
        let token = TestSecrets.apnsToken()
        let withoutSecret = try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.user.email, "bundleid": "com.example.mail",
            "creds": try user.user.sealJSON(["apnsToken": token, "userName": user.user.email, "password": user.password]),
        ])
        #expect(withoutSecret.json["responseCode"] == "UserUpdated")
        #expect(withoutSecret.json["pushTag"]?.count == 16)
        let secret = TestSecrets.deviceSecret(for: token)
        let info = try user.user.sealJSON(["pushToken": token, "deviceSecret": secret], for: "getnotificationhistory.info")
        #expect(try api.call("/getnotificationhistory",
                             ["userid": user.user.userID, "info": info]).json["responseCode"] == "UserSubscriptionNotFound")
        #expect(try user.register(with: api, token: token).json["responseCode"] == "UserUpdated")
        let again = try user.user.sealJSON(["pushToken": token, "deviceSecret": secret], for: "getnotificationhistory.info")
        let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": again])
        #expect(answer.bodyText == #"{"notifications":[],"responseCode":"NotificationHistory"}"#, "\(answer.bodyText)")
    }
}
