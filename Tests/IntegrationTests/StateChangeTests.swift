import Curl
import Foundation
import MariaDB
import Testing

/// A state change is authorised by whoever owns the state (docs/security.md, "Who may
/// change a device"). Written as the attacks: a request-log reader resending a logged
/// body, verbatim or with a clear parameter swapped, and the push service, which holds
/// a device's push token but not its secret. Each asserts that nothing changed.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct StateChangeTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("state-change-tests"))
        database = try TestStack.serviceConnection()
    }

    static let refused = #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#

    /// The record's devices, oldest first: (privacy mode, badge, development).
    func devices(_ user: RegisteredUser) throws -> [(mode: Int64, badge: Int64, development: Int64)] {
        try database.query("""
            SELECT d.privacy_mode, d.badge, d.development FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.user.userID) ORDER BY d.id
            """).map { (try $0.int(0), try $0.int(1), try $0.int(2)) }
    }

    func expectRefused(_ answer: HTTPResponse, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(answer.status == 400 && answer.bodyText == Self.refused, "\(comment?.rawValue ?? "") \(answer.status) \(answer.bodyText)",
                sourceLocation: sourceLocation)
    }

    /// A request log's /registerdevicev2 body (bound creds, inside the window), resent
    /// verbatim and with each clear parameter swapped: `privacy=preview` to read the
    /// next mail in clear, `privacy=blind` with the reader's own certificate, another
    /// bundle id, `force`, the device flags. Every one is refused; the device keeps the
    /// `secure` mode its own creds named.
    @Test func aLoggedRegistrationResentOrSwappedChangesNothing() throws {
        let user = try RegisteredUser.register(with: api)
        var creds = user.creds(token: user.token)
        creds["deviceSecret"] = TestSecrets.deviceSecret(for: user.token)
        creds["privacy"] = "secure"
        let logged: [String: String] = [
            "userid": user.user.userID, "email": user.user.email, "creds": try user.user.sealJSON(creds, for: "registerdevicev2.creds"),
            "bundleid": "com.example.mail", "exchVersion": "3", "force": "0",
        ]
        let first = try api.call("/registerdevicev2", logged)
        #expect(first.json["responseCode"] == "UserUpdated" && first.json["privacy"] == "secure", "\(first.bodyText)")
        let swaps: [[String: String]] = [
            [:], ["privacy": "preview"], ["privacy": "generic"], ["privacy": "blind", "privacyCertificate": "MIIBattackerscertificate"],
            ["bundleid": "com.example.other"], ["force": "1"], ["defaultSound": "loud.caf"],
        ]
        for swap in swaps {
            expectRefused(try api.call("/registerdevicev2", logged.merging(swap) { $1 }), "\(swap)")
        }
        expectRefused(try api.call("/registerdevicev2", logged, headers: [("development", "1")]), "development header")
        #expect(try devices(user).map(\.mode) == [3])
    }

    /// The clear `privacy` parameter (the form before the mode moved into `creds`)
    /// chooses a new device's mode, and never changes an existing one's, even in a
    /// fresh registration by the device itself: the mode changes inside sealed values.
    @Test func aClearPrivacyParameterNeverChangesAnExistingDevice() throws {
        let user = try RegisteredUser.register(with: api)
        let token = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: token, extra: ["privacy": "secure"]).json["privacy"] == "secure")
        expectRefused(try user.register(with: api, token: token, extra: ["privacy": "preview"]))
        // The same mode in clear only confirms it.
        #expect(try user.register(with: api, token: token, extra: ["privacy": "secure"]).json["responseCode"] == "UserAlreadySubscribed")
        // With unbound creds (a client without a secret; anyone who saw them could resend
        // them): no key in clear, and never a lower mode.
        let legacy = TestSecrets.apnsToken()
        let key = try PrivateNotificationTests.DeviceKey.make().pointBase64
        expectRefused(try user.register(with: api, token: legacy, extra: ["privacy": "encrypted", "privacyKey": key],
                                        sealedFor: nil, withSecret: false))
        #expect(try user.register(with: api, token: legacy, extra: ["privacy": "secure"],
                                  sealedFor: nil, withSecret: false).json["privacy"] == "secure")
        expectRefused(try user.register(with: api, token: legacy, extra: ["privacy": "preview"], sealedFor: nil, withSecret: false))
        try database.execute("""
            DELETE d
            FROM Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.user.userID) AND d.secret_hash IS NULL
            """)
        // Clear and sealed must agree.
        var creds = user.creds(token: token)
        creds["privacy"] = "generic"
        expectRefused(try user.register(with: api, token: token, creds: creds, extra: ["privacy": "preview"]))
        #expect(try devices(user).map(\.mode) == [0, 3])
        // Sealed in creds, the device changes its own mode.
        let changed = try user.register(with: api, token: token, creds: creds)
        #expect(changed.json["responseCode"] == "UserUpdated" && changed.json["privacy"] == "generic", "\(changed.bodyText)")
        #expect(try devices(user).map(\.mode) == [0, 1])
    }

    /// /updateprivacy's logged body resent after the device moved on: the device is not
    /// put back in the older mode.
    @Test func aLoggedPrivacyChangeResentLaterIsRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let secret = TestSecrets.deviceSecret(for: user.token)
        func info(_ mode: String) throws -> String {
            try user.user.sealJSON(["pushToken": user.token, "deviceSecret": secret, "privacy": mode], for: "updateprivacy.info")
        }
        let toPreview = try info("preview")
        let toSecure = try info("secure")
        #expect(try api.call("/updateprivacy", ["userid": user.user.userID, "info": toPreview]).json["responseCode"] == "UpdateSuccess")
        #expect(try api.call("/updateprivacy", ["userid": user.user.userID, "info": toSecure]).json["responseCode"] == "UpdateSuccess")
        expectRefused(try api.call("/updateprivacy", ["userid": user.user.userID, "info": toPreview]))
        #expect(try devices(user).map(\.mode) == [3])
    }

    /// /unregister's logged body resent after the device registered again: the device
    /// stays.
    @Test func aLoggedUnregistrationResentLaterIsRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let second = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        let logged = ["userid": user.user.userID,
                      "token": try user.user.sealJSON(["apnsToken": second, "deviceSecret": TestSecrets.deviceSecret(for: second)],
                                                      for: "unregister.token")]
        #expect(try api.call("/unregister", logged).json["responseCode"] == "DeviceUnregistered")
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        expectRefused(try api.call("/unregister", logged))
        #expect(try devices(user).count == 2)
    }

    /// /updatedevice's logged body resent after the device moved back: refused.
    @Test func aLoggedTokenChangeResentLaterIsRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let next = TestSecrets.apnsToken()
        let secret = TestSecrets.deviceSecret(for: user.token)
        func change(_ old: String, _ new: String) throws -> [String: String] {
            ["userid": user.user.userID,
             "token": try user.user.sealJSON(["oldApnsToken": old, "apnsToken": new, "deviceSecret": secret], for: "updatedevice.token")]
        }
        let forth = try change(user.token, next)
        #expect(try api.call("/updatedevice", forth).json["responseCode"] == "UpdateSuccess")
        #expect(try api.call("/updatedevice", try change(next, user.token)).json["responseCode"] == "UpdateSuccess")
        expectRefused(try api.call("/updatedevice", forth))
        // The device still answers to its first token.
        let history = try user.user.sealJSON(["pushToken": user.token, "deviceSecret": secret], for: "getnotificationhistory.info")
        let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": history])
        #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#), "\(answer.bodyText)")
    }

    /// /updatedevice merges away a row the new token already has only when that row is
    /// the same phone's (the same secret): one device's owner cannot rename it onto
    /// another device's token and so delete that device.
    @Test func aTokenChangeMergesAwayNoOtherOwnersDevice() throws {
        let user = try RegisteredUser.register(with: api)
        let other = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: other).json["responseCode"] == "UserUpdated")
        let onto = try user.user.sealForDevice(["oldApnsToken": user.token, "apnsToken": other], token: user.token, for: "updatedevice.token")
        expectRefused(try api.call("/updatedevice", ["userid": user.user.userID, "token": onto]))
        #expect(try devices(user).count == 2)
    }

    /// What the push service can send with the token it delivers to: the contract's
    /// bare token, an unbound object, a bound one without the device's secret, at
    /// /unregister, /updatedevice and /updatesynckey. A device that registered a
    /// secret is changed by none of them.
    @Test func thePushTokenAloneChangesNoDeviceWithASecret() throws {
        let user = try RegisteredUser.register(with: api)
        let other = TestSecrets.apnsToken()
        let forged = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        let bodies: [(String, String, String)] = try [
            ("/unregister", "token", user.user.seal(user.token)),
            ("/unregister", "token", user.user.sealJSON(["apnsToken": user.token])),
            ("/unregister", "token", user.user.sealJSON(["apnsToken": user.token], for: "unregister.token")),
            ("/unregister", "token", user.user.sealJSON(["apnsToken": user.token, "deviceSecret": forged], for: "unregister.token")),
            ("/updatedevice", "token", user.user.seal(user.token)),
            ("/updatedevice", "token", user.user.sealJSON(["oldApnsToken": user.token, "apnsToken": other])),
            ("/updatedevice", "token", user.user.sealJSON(["oldApnsToken": user.token, "apnsToken": other], for: "updatedevice.token")),
            ("/updatesynckey", "info", user.user.sealJSON(["apnsToken": user.token, "backgroundSyncKey": "planted",
                                                           "syncKeyExpirationTime": "12/31/2099 00:00:00.000"])),
        ]
        for (path, name, value) in bodies {
            expectRefused(try api.call(path, ["userid": user.user.userID, name: value], headers: [("development", "1")]), "\(path)")
        }
        #expect(try devices(user).map { [$0.mode, $0.development] } == [[0, 0]])
        #expect(try database.queryOne("""
            SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.user.userID) AND d.sync_key_sealed IS NOT NULL
            """)?.int(0) == 0)
        // A check-in's clear flags do not change it either.
        let payload = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1],
                                             for: "getsubscriptionstatusv2.subscriptionPayload")
        _ = try api.call("/getsubscriptionstatusv2", ["userid": user.user.userID, "subscriptionPayload": payload], headers: [("development", "1")])
        #expect(try devices(user).map(\.development) == [0])
    }

    /// A sealedAt more than a minute ahead of the server's clock is refused; a device
    /// clock a little fast is not.
    @Test func aValueSealedForLaterIsRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let object: [String: Any] = ["pushToken": user.token, "deviceSecret": TestSecrets.deviceSecret(for: user.token)]
        let late = try user.user.sealJSON(object, for: "getnotificationhistory.info", sealedAt: now + 3 * 60_000)
        expectRefused(try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": late]))
        let fast = try user.user.sealJSON(object, for: "getnotificationhistory.info", sealedAt: now + 20_000)
        let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": fast])
        #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#), "\(answer.bodyText)")
    }

    // MARK: Blocks an attacker seals

    /// Sealed values joined block to block. Each block is sealed on its own under the
    /// user's public key, which anyone with the ApiToken can fetch, so an attacker can
    /// add blocks of their own to a logged value, or keep some of its blocks and seal
    /// the others anew.
    func joined(_ sealed: [String]) throws -> String {
        try Data(sealed.flatMap { try #require(Data(base64Encoded: $0)) }).base64EncodedString()
    }

    /// A logged value with a block of whitespace sealed before or after it parses to
    /// the same request in new bytes: still spent. Neither more history nor a device's
    /// older privacy mode comes back.
    @Test func aLoggedValueWithBlocksOfWhitespaceAddedIsStillSpent() throws {
        let user = try RegisteredUser.register(with: api)
        let secret = TestSecrets.deviceSecret(for: user.token)
        let blank = try user.user.seal([" ", "\n"])
        func padded(_ logged: String) throws -> [String] {
            [try joined([logged, blank[0]]), try joined([blank[1], logged]), try joined([blank[0], logged, blank[1]])]
        }
        let history = try user.user.sealJSON(["pushToken": user.token, "deviceSecret": secret], for: "getnotificationhistory.info")
        let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": history])
        #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#), "\(answer.bodyText)")
        for value in try padded(history) {
            expectRefused(try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": value]))
        }
        let toPreview = try user.user.sealJSON(["pushToken": user.token, "deviceSecret": secret, "privacy": "preview"], for: "updateprivacy.info")
        let toSecure = try user.user.sealJSON(["pushToken": user.token, "deviceSecret": secret, "privacy": "secure"], for: "updateprivacy.info")
        #expect(try api.call("/updateprivacy", ["userid": user.user.userID, "info": toPreview]).json["responseCode"] == "UpdateSuccess")
        #expect(try api.call("/updateprivacy", ["userid": user.user.userID, "info": toSecure]).json["responseCode"] == "UpdateSuccess")
        for value in try padded(toPreview) {
            expectRefused(try api.call("/updateprivacy", ["userid": user.user.userID, "info": value]))
        }
        #expect(try devices(user).map(\.mode) == [3])
    }

    /// A value whose secret fills a block of its own, its `sealedAt` in the next: the
    /// attacker keeps the secret's block and seals the rest anew, asking for more at
    /// the same `sealedAt`. The same act, so spent.
    @Test func blocksSplicedAroundALoggedSecretAtItsOwnTimeAreSpent() throws {
        let user = try RegisteredUser.register(with: api)
        let sealedAt = Int64(Date().timeIntervalSince1970 * 1000)
        // RSA-2048 with PKCS#1 v1.5 padding: 245 bytes of plaintext in a block.
        var first = #"{"deviceSecret":"\#(TestSecrets.deviceSecret(for: user.token))","pushToken":"\#(user.token)","#
        try #require(first.utf8.count <= 245)
        first += String(repeating: " ", count: 245 - first.utf8.count)
        func rest(limit: Int) -> String { #""limit":\#(limit),"purpose":"getnotificationhistory.info","sealedAt":\#(sealedAt)}"# }
        let logged = try user.user.seal([first, rest(limit: 1)])
        let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": try joined(logged)])
        #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#), "\(answer.bodyText)")
        let spliced = try joined([logged[0], try user.user.seal(rest(limit: 50))])
        expectRefused(try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": spliced]))
    }

    /// An envelope (one RSA block of a key, the object under AES-GCM) is accepted
    /// wherever a chunked value is: a registration's `creds` that name the device's
    /// mode, a privacy change. Its plaintext opens only whole, so nothing can be kept
    /// and the rest sealed anew; resent, with a block added, it is spent.
    @Test func anEnvelopeIsAcceptedOnceAndOnlyWhole() throws {
        let user = try RegisteredUser.register(with: api)
        var creds = user.creds(token: user.token)
        creds["deviceSecret"] = TestSecrets.deviceSecret(for: user.token)
        creds["privacy"] = "secure"
        let registration = try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.user.email, "bundleid": "com.example.mail",
            "creds": try user.user.sealJSON(creds, for: "registerdevicev2.creds", envelope: true),
        ])
        #expect(registration.json["responseCode"] == "UserUpdated" && registration.json["privacy"] == "secure", "\(registration.bodyText)")
        let info = try user.user.sealJSON(["pushToken": user.token, "deviceSecret": TestSecrets.deviceSecret(for: user.token),
                                           "privacy": "generic"], for: "updateprivacy.info", envelope: true)
        #expect(try api.call("/updateprivacy", ["userid": user.user.userID, "info": info]).json["responseCode"] == "UpdateSuccess")
        #expect(try devices(user).map(\.mode) == [1])
        // An envelope opens only whole, so it is spent by what it holds: two requests
        // of one use and device in one millisecond (two pushes' contents fetched at
        // once) are each answered; the same one again is refused.
        let sealedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let histories = try [1, 2].map { limit in
            try user.user.sealJSON(["pushToken": user.token, "deviceSecret": TestSecrets.deviceSecret(for: user.token), "limit": limit],
                                   for: "getnotificationhistory.info", sealedAt: sealedAt, envelope: true)
        }
        for history in histories {
            let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": history])
            #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#), "\(answer.bodyText)")
        }
        expectRefused(try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": histories[0]]))
        let body = try #require(Data(base64Encoded: String(info.dropFirst(3))))
        let blank = try #require(Data(base64Encoded: try user.user.seal(" ")))
        for resent in [info, "e1:" + (body + blank).base64EncodedString(), "e1:" + (blank + body).base64EncodedString()] {
            expectRefused(try api.call("/updateprivacy", ["userid": user.user.userID, "info": resent]))
        }
    }

    /// The mark names the device a value acts on: two devices of one user that seal
    /// the same use in the same millisecond are each answered.
    @Test func twoDevicesOfOneUserSealingInTheSameMillisecondAreEachAnswered() throws {
        let user = try RegisteredUser.register(with: api)
        let second = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        let sealedAt = Int64(Date().timeIntervalSince1970 * 1000)
        for token in [user.token, second] {
            let info = try user.user.sealJSON(["pushToken": token, "deviceSecret": TestSecrets.deviceSecret(for: token)],
                                              for: "getnotificationhistory.info", sealedAt: sealedAt)
            let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": info])
            #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#), "\(token.prefix(8)): \(answer.bodyText)")
        }
    }

    // MARK: Credentials at a check-in

    func freshCredentials(_ user: RegisteredUser) throws -> Int64? {
        try database.queryOne("""
            SELECT COUNT(*) FROM MailCredentialsFresh f JOIN EnsSubscriptionInfo s ON s.id = f.record_id WHERE s.userid = \(user.user.userID)
            """)?.int(0)
    }

    func checkIn(_ user: RegisteredUser, creds: String, email: Bool = true) throws -> HTTPResponse {
        let payload = try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1],
                                             for: "getsubscriptionstatusv2.subscriptionPayload")
        var parameters = ["userid": user.user.userID, "subscriptionPayload": payload, "creds": creds]
        if email { parameters["email"] = user.user.email }
        return try api.call("/getsubscriptionstatusv2", parameters)
    }

    /// The push service offers made-up credentials at a check-in (it has the push
    /// token, not the secret); the device itself offers a wrong password: neither is
    /// left for a callback. The device's right new password is, after Exchange said
    /// yes, and its logged body resent is refused.
    @Test func checkInCredentialsNeedTheSecretAndAProof() throws {
        let user = try RegisteredUser.register(with: api)
        let madeUp = ["userName": user.user.email, "password": "made-up-by-the-push-service"]
        TestSecrets.remember("made-up-by-the-push-service")
        expectRefused(try checkIn(user, creds: user.user.sealJSON(madeUp, for: "getsubscriptionstatusv2.creds")))
        expectRefused(try checkIn(user, creds: user.user.sealJSON(madeUp)))
        #expect(try freshCredentials(user) == 0)

        let secret = TestSecrets.deviceSecret(for: user.token)
        let wrong = try checkIn(user,
                                creds: user.user.sealJSON(madeUp.merging(["deviceSecret": secret]) { $1 }, for: "getsubscriptionstatusv2.creds"))
        #expect(wrong.json["responseCode"] == "UserSubscribed" && wrong.json["credentials"] == "Unused", "\(wrong.bodyText)")
        #expect(try freshCredentials(user) == 0)

        let changed = "Ch4nged-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(changed)
        try ExchangeSimulator.mailbox(user.user.email, userName: user.user.email, password: changed)
        let fresh = try user.user.sealJSON(["userName": user.user.email, "password": changed, "deviceSecret": secret],
                                           for: "getsubscriptionstatusv2.creds")
        let stored = try checkIn(user, creds: fresh)
        #expect(stored.json["credentials"] == "Stored", "\(stored.bodyText)")
        #expect(try freshCredentials(user) == 1)
        expectRefused(try checkIn(user, creds: fresh))
    }

    /// A second device on `user`'s record, registered the original contract's way: no
    /// secret, unbound creds.
    func registerLegacyDevice(_ user: RegisteredUser) throws {
        let answer = try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.user.email, "bundleid": "com.example.mail",
            "creds": try user.user.sealJSON(["apnsToken": TestSecrets.apnsToken(), "userName": user.user.email, "password": user.password]),
        ])
        #expect(answer.json["responseCode"] == "UserUpdated", "\(answer.bodyText)")
    }

    /// The v1 check-in names no device and proves nothing: it keeps no device with a
    /// secret from being reaped.
    @Test func aV1CheckInKeepsOnlyDevicesWithoutASecretAlive() throws {
        let user = try RegisteredUser.register(with: api)
        try registerLegacyDevice(user)
        try database.execute("""
            UPDATE Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row SET d.last_checkin_at = NOW(3) - INTERVAL 10 DAY
            WHERE s.userid = \(user.user.userID)
            """)
        #expect(try api.call("/getsubscriptionstatus", ["userid": user.user.userID]).json["responseCode"] == "UserSubscribed")
        let refreshed = {
            try database.query("""
                SELECT d.secret_hash IS NULL FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
                WHERE s.userid = \(user.user.userID) AND d.last_checkin_at > NOW(3) - INTERVAL 1 DAY
                """).map { try $0.int(0) }
        }
        #expect(TestStack.eventually(within: 10) { (try? refreshed()) == [1] })
    }

    /// A v1 check-in names no device and proves nothing: it keeps no record without a
    /// device of the original contract alive, so records an ApiToken holder made and left
    /// empty still go after `reap.empty_record_days`. One with such a device it keeps.
    @Test func aV1CheckInKeepsNoEmptyRecordAlive() throws {
        let empty = try api.newUser()
        let legacy = try RegisteredUser.register(with: api)
        try registerLegacyDevice(legacy)
        func checkedIn(_ userID: String) throws -> Bool {
            try database.queryOne("SELECT last_checkin_at IS NOT NULL FROM EnsSubscriptionInfo WHERE userid = \(userID)")?.int(0) == 1
        }
        try database.execute("UPDATE EnsSubscriptionInfo SET last_checkin_at = NULL WHERE userid IN (\(empty.userID), \(legacy.user.userID))")
        #expect(try api.call("/getsubscriptionstatus", ["userid": empty.userID]).json["responseCode"] == "UserRecordPresentNotSubscribed")
        #expect(try api.call("/getsubscriptionstatus", ["userid": legacy.user.userID]).json["responseCode"] == "UserSubscribed")
        // Check-ins are written in a batch within a second: the legacy record's shows,
        // and by then the empty record's would have too.
        #expect(TestStack.eventually(within: 10) { (try? checkedIn(legacy.user.userID)) == true })
        #expect(try !checkedIn(empty.userID))
    }
}
