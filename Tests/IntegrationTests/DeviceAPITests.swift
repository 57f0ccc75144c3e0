import Curl
import Foundation
import MariaDB
import POSIX
import Testing

/// Every endpoint of docs/api.md through nginx, sealed with an independent implementation.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct DeviceAPITests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("device-api-tests"))
        database = try TestStack.serviceConnection()
    }

    // MARK: helpers

    /// Pretends Exchange subscribed this user and last called back `callbackAge` seconds
    /// ago; `register` below proves itself with these credentials.
    func markSubscribed(_ user: TestUser, callbackAge: Int = 0, password: String = "hunter2-secret", oauthToken: String? = nil) throws {
        try user.pretendSubscribed(database: database, password: password, oauthToken: oauthToken, callbackAge: callbackAge)
    }

    func register(_ user: TestUser, token: String, headers: [(String, String)] = [],
                  extra: [String: String] = [:], password: String = "hunter2-secret") throws -> HTTPResponse {
        TestSecrets.remember(password)
        let creds = try user.sealJSON(["apnsToken": token, "userName": user.email, "password": password])
        var parameters = ["userid": user.userID, "email": user.email, "creds": creds,
                          "bundleid": "com.example.mail", "exchVersion": "15", "force": "0"]
        parameters.merge(extra) { _, new in new }
        return try api.call("/registerdevicev2", parameters, headers: headers)
    }

    func deviceCount(_ user: TestUser) throws -> Int64 {
        try database.queryOne("""
            SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(user.userID)
            """)?.int(0) ?? -1
    }

    static func sha256Hex(_ text: String) throws -> String {
        try TestStack.run("/bin/sh", ["-c", "printf %s '\(text)' | openssl dgst -sha256 -r | cut -d' ' -f1"])
    }

    // MARK: authentication

    @Test func missingUnknownAndRevokedTokensGet401() throws {
        let body = ["email": "x@example.test"]
        for token in ["", "ens_0000000000000000000000000000000000000000000000000000000000000000"] {
            let response = try api.call("/getpublickey", body, apiToken: token)
            #expect(response.status == 401)
            #expect(response.bodyText == #"{"responseCode":"Unauthorized","message":"A valid ApiToken header is required."}"#)
        }
        let doomed = try TestStack.newToken("doomed-token")
        #expect(try api.call("/getpublickey", body, apiToken: doomed).status == 200)
        try TestStack.run(TestStack.root + "/.build/debug/ens-cron",
                          ["token", "revoke", "doomed-token", "--config", TestStack.directory + "/ens.conf"])
        // Responders look at the cache file every auth.refresh_seconds (2 s in tests).
        #expect(try TestStack.eventually(within: 6) { try api.call("/getpublickey", body, apiToken: doomed).status == 401 })
    }

    // MARK: /getpublickey

    @Test func getPublicKeyCreatesOneRecordWithOneStableKey() throws {
        let user = try api.newUser()
        #expect(user.responseCode == "UserRecordPresentNotSubscribed")
        #expect(user.userID == (try Self.sha256Hex(user.email.lowercased())))
        #expect(user.publicKeyPEM.hasPrefix("-----BEGIN PUBLIC KEY-----\n"))
        #expect(user.publicKeyPEM.hasSuffix("-----END PUBLIC KEY-----\n"))
        // The key parses as RSA-2048 for an independent implementation.
        let bits = try TestStack.run("/bin/sh", ["-c", "printf '%s' '\(user.publicKeyPEM)' | openssl pkey -pubin -noout -text | head -1"])
        #expect(bits.contains("2048 bit"))
        // Same key again, by email in another case, as a form, with a matching userid.
        let again = try api.call("/getpublickey", ["email": user.email.uppercased(), "userid": user.userID], form: true)
        #expect(again.json["pubKey"] == user.publicKeyPEM)
        #expect(again.json["userid"] == user.userID)
        // The sealed forms it opens besides the chunked one: envelopes (docs/api.md).
        #expect(again.header("ENS-Sealing") == "e1")
        #expect(try database.queryOne("SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(user.userID)")?.int(0) == 1)
    }

    @Test func getPublicKeyRejectsMismatchedOrMissingIdentity() throws {
        let mismatch = try api.call("/getpublickey", ["email": "a@example.test", "userid": String(repeating: "ab", count: 32)])
        #expect(mismatch.status == 400)
        #expect(mismatch.json["responseCode"] == "InvalidRequest")
        #expect(try api.call("/getpublickey", [:]).status == 400)
        #expect(try api.call("/getpublickey", ["email": "a@example.test", "userid": "not-hex"]).status == 400)
    }

    // MARK: bad input

    @Test func bodiesAreCheckedBeforeTheyAreUsed() throws {
        let headers = [("ApiToken", api.token)]
        let plain = try TestStack.post("/getpublickey", body: Array("email=a@b.test".utf8), contentType: "text/plain", headers: headers)
        #expect(plain.status == 415)
        #expect(plain.json["responseCode"] == "UnsupportedMediaType")
        let large = try TestStack.post("/getpublickey", body: Array(repeating: UInt8(ascii: "a"), count: 100_000),
                                       contentType: "application/json", headers: headers)
        #expect(large.status == 413)
        #expect(large.json["responseCode"] == "PayloadTooLarge")
        // Refused by nginx itself (the test stack allows 1 MiB), or by ENS behind Apache
        // (which caps at 4 MiB). Over HTTP/1.1: Apache follows an early HTTP/2 413 with
        // RST_STREAM(NO_ERROR) (RFC 9113, 8.1), which libcurl 7.88 reports as an error.
        let huge = try TestStack.post("/getpublickey", body: Array(repeating: UInt8(ascii: "a"), count: 2_000_000), contentType: "application/json",
                                      headers: headers, client: TestStack.client(http2: false))
        #expect(huge.status == 413)
        #expect(huge.json["responseCode"] == "PayloadTooLarge")
        for (body, type) in [
            ("{\"email\": ", "application/json"),
            ("[1,2]", "application/json"),
            ("{\"email\": {\"nested\": 1}}", "application/json"),
            ("{\"email\": \"a\\u0000b@example.test\"}", "application/json"),
            ("email=%ff%fe@example.test", "application/x-www-form-urlencoded"),
            ("email=a%00b@example.test", "application/x-www-form-urlencoded"),
            ("email=%zz", "application/x-www-form-urlencoded"),
        ] {
            let response = try TestStack.post("/getpublickey", body: Array(body.utf8), contentType: type, headers: headers)
            #expect(response.status == 400, "\(body)")
            #expect(response.json["responseCode"] == "InvalidRequest", "\(body)")
        }
        let invalidUTF8 = try TestStack.post("/getpublickey", body: [0x7b, 0x22, 0x65, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d],
                                             contentType: "application/json", headers: headers)
        #expect(invalidUTF8.status == 400)
    }

    // MARK: sealed parameters

    @Test func everySealedFailureLooksTheSame() throws {
        let user = try api.newUser()
        let other = try api.newUser()
        try markSubscribed(user)
        let token = TestSecrets.apnsToken()
        let k = 256
        let randomBlock = Data((0..<k).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        let shortBlock = Data((0..<(k - 1)).map { _ in UInt8.random(in: 1...255) }).base64EncodedString()
        let blobs = [
            try other.sealJSON(["apnsToken": token, "userName": "u", "password": "p"]),  // wrong key
            randomBlock,                                                                     // bad padding
            shortBlock,                                                                      // bad length
            "!!!not base64!!!",                                                              // bad base64
            try user.seal("this is not JSON"),                                               // bad JSON
            try user.sealJSON(["userName": "u", "password": "p"]),                          // missing apnsToken
        ]
        var bodies: Set<String> = []
        for blob in blobs {
            let response = try api.call("/registerdevicev2", ["userid": user.userID, "creds": blob, "bundleid": "b"])
            #expect(response.status == 400)
            bodies.insert(response.bodyText)
        }
        #expect(bodies == [#"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#])
        // ...and the same bytes as any other invalid request: nothing tells them apart.
        let missing = try api.call("/registerdevicev2", ["userid": user.userID, "bundleid": "b"])
        #expect(missing.status == 400)
        #expect(bodies == [missing.bodyText])
    }

    @Test func multiChunkSealedParametersOpen() throws {
        let user = try api.newUser()
        let longPassword = String(repeating: "correct-horse-battery-staple-", count: 25)  // ~725 bytes: 4 chunks
        try markSubscribed(user, password: longPassword, oauthToken: "oauth-secret-token-value")
        let response = try register(user, token: TestSecrets.apnsToken(), password: longPassword)
        #expect(response.json["responseCode"] == "UserUpdated")
        // Padding damage from form encoding ("+" read as space) is tolerated.
        let creds = try user.sealJSON(["apnsToken": TestSecrets.apnsToken(), "oauthAccessToken": "oauth-secret-token-value"])
        TestSecrets.remember("oauth-secret-token-value")
        let damaged = creds.replacingOccurrences(of: "+", with: " ").replacingOccurrences(of: "=", with: "")
        let form = try api.call("/registerdevicev2", ["userid": user.userID, "email": user.email, "creds": damaged, "bundleid": "b"], form: true)
        #expect(form.json["responseCode"] == "UserUpdated")
        // The same long creds as one envelope, its base64 damaged the same way.
        let envelope = try user.sealJSON(["apnsToken": TestSecrets.apnsToken(), "userName": user.email, "password": longPassword],
                                         envelope: true)
        #expect(envelope.hasPrefix("e1:"))
        let sent = envelope.replacingOccurrences(of: "+", with: " ").replacingOccurrences(of: "=", with: "")
        let enveloped = try api.call("/registerdevicev2", ["userid": user.userID, "email": user.email, "creds": sent, "bundleid": "b"],
                                     form: true)
        #expect(enveloped.json["responseCode"] == "UserUpdated", "\(enveloped.bodyText)")
    }

    // MARK: /registerdevicev2

    @Test func registrationPaths() throws {
        let missing = try api.call("/registerdevicev2", ["userid": String(repeating: "0", count: 64), "creds": "AAAA", "bundleid": "b"])
        #expect(missing.json["responseCode"] == "UserSubscriptionNotFound")

        let user = try api.newUser()
        let token = TestSecrets.apnsToken()
        // Not subscribed: the Exchange path. example.test has no Autodiscover endpoint in
        // the Exchange simulator here (ExchangeTests covers the paths that subscribe).
        try ExchangeSimulator.domain("example.test", mode: "none")
        try database.execute("DELETE FROM EWSUrlCache WHERE domain = 'example.test'")
        let exchange = try register(user, token: token)
        #expect(exchange.status == 200)
        #expect(exchange.json["responseCode"] == "AutodiscoverFailed")
        #expect(exchange.json["message"]?.isEmpty == false)

        try markSubscribed(user)
        #expect(try register(user, token: token).json["responseCode"] == "UserUpdated")
        #expect(try register(user, token: token).json["responseCode"] == "UserAlreadySubscribed")
        #expect(try register(user, token: token, headers: [("badge", "1")]).json["responseCode"] == "UserUpdated")
        #expect(try register(user, token: token, headers: [("badge", "1")]).json["responseCode"] == "UserAlreadySubscribed")
        #expect(try register(user, token: token.uppercased()).json["responseCode"] == "UserAlreadySubscribed")
        #expect(try deviceCount(user) == 1)
        let flags = try database.queryOne("""
            SELECT d.badge, d.development
            FROM Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.userID)
            """)
        #expect(try flags?.int(0) == 1)
        #expect(try flags?.int(1) == 0)
        // force = 1 goes to Exchange even when subscribed.
        try ExchangeSimulator.domain("example.test", mode: "none")
        try database.execute("DELETE FROM EWSUrlCache WHERE domain = 'example.test'")
        #expect(try register(user, token: token, extra: ["force": "1"]).json["responseCode"] == "AutodiscoverFailed")
    }

    @Test func concurrentRegistrationsOfOneTokenMakeOneRow() throws {
        let user = try api.newUser()
        try markSubscribed(user, oauthToken: "concurrent-oauth-token")
        let token = TestSecrets.apnsToken()
        let creds = try user.sealJSON(["apnsToken": token, "oauthAccessToken": "concurrent-oauth-token"])
        TestSecrets.remember("concurrent-oauth-token")
        let results = SynchronizedStatuses()
        var threads: [OSThread] = []
        for _ in 0..<16 {
            let apiToken = api.token
            threads.append(try OSThread.start(stackSize: 1 << 20) {
                let client = try? DeviceClient(token: apiToken)
                // As a client would: a 503 (every Exchange place of a responder taken)
                // is tried again after a moment.
                for _ in 0..<50 {
                    let response = try? client?.call("/registerdevicev2",
                                                     ["userid": user.userID, "email": user.email, "creds": creds, "bundleid": "b"])
                    guard response?.status == 503, response?.header("Retry-After") != nil else {
                        results.append(response?.status ?? -1)
                        return
                    }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                results.append(503)
            })
        }
        for thread in threads { thread.join() }
        #expect(results.values.allSatisfy { $0 == 200 }, "\(results.values)")
        #expect(try deviceCount(user) == 1)
    }

    // MARK: /unregister and /updatedevice

    @Test func unregisterRemovesDevicesThenTheRecord() throws {
        let user = try api.newUser()
        try markSubscribed(user)
        let first = TestSecrets.apnsToken(), second = TestSecrets.apnsToken()
        _ = try register(user, token: first)
        _ = try register(user, token: second)
        #expect(try deviceCount(user) == 2)
        let sealed = try user.seal([first, first])
        #expect(try api.call("/unregister", ["userid": user.userID, "token": sealed[0]]).json["responseCode"] == "DeviceUnregistered")
        #expect(try deviceCount(user) == 1)
        // Idempotent.
        #expect(try api.call("/unregister", ["userid": user.userID, "token": sealed[1]]).json["responseCode"] == "DeviceUnregistered")
        let last = try user.seal(second)
        #expect(try api.call("/unregister", ["userid": user.userID, "token": last]).json["responseCode"] == "DeviceUnregistered")
        #expect(try database.queryOne("SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(user.userID)")?.int(0) == 0)
        #expect(try api.call("/unregister", ["userid": user.userID, "token": last]).json["responseCode"] == "UserSubscriptionNotFound")
    }

    @Test func updateDeviceReplacesAndMerges() throws {
        let user = try api.newUser()
        try markSubscribed(user)
        let old = TestSecrets.apnsToken(), new = TestSecrets.apnsToken(), other = TestSecrets.apnsToken()
        _ = try register(user, token: old, headers: [("badge", "1")], extra: ["defaultSound": "chime.caf"])
        let unknown = try user.sealJSON(["oldApnsToken": TestSecrets.apnsToken(), "apnsToken": new])
        #expect(try api.call("/updatedevice", ["userid": user.userID, "token": unknown]).json["responseCode"] == "UpdateFail")
        let replace = try user.sealJSON(["oldApnsToken": old, "apnsToken": new])
        #expect(try api.call("/updatedevice", ["userid": user.userID, "token": replace]).json["responseCode"] == "UpdateSuccess")
        #expect(try deviceCount(user) == 1)
        // The settings moved with the token.
        #expect(try register(user, token: new, headers: [("badge", "1")],
                             extra: ["defaultSound": "chime.caf"]).json["responseCode"] == "UserAlreadySubscribed")
        // Merge: both tokens registered, replacing one by the other leaves one row.
        _ = try register(user, token: other)
        let merge = try user.sealJSON(["oldApnsToken": new, "apnsToken": other])
        #expect(try api.call("/updatedevice", ["userid": user.userID, "token": merge]).json["responseCode"] == "UpdateSuccess")
        #expect(try deviceCount(user) == 1)
        let nobody = try api.call("/updatedevice", ["userid": String(repeating: "1", count: 64), "token": merge])
        #expect(nobody.json["responseCode"] == "UserSubscriptionNotFound")
    }

    // MARK: check-ins

    /// v1 takes only `userid` (the SHA-256 of the address, which anyone can compute) and
    /// a date in clear. It used to answer NotSubscribed when a notification was sent
    /// after that date, so any ApiToken holder could binary-search the time of someone's
    /// last mail. The attack, now: every date before and after the notification, and
    /// none at all, get the same answer; only v2, whose device proves itself with its
    /// sealed push token, still compares.
    @Test func aV1CheckInRevealsNothingAboutNotificationTimes() throws {
        let user = try api.newUser()
        let token = TestSecrets.apnsToken()
        try markSubscribed(user)
        _ = try register(user, token: token)
        try database.execute("""
            UPDATE Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row SET d.last_notified_at = '2024-06-01 12:00:00.000'
            WHERE s.userid = \(user.userID)
            """)
        let probes = ["01/01/2020 00:00:00.000", "06/01/2024 11:59:59.999", "06/01/2024 12:00:00.000",
                      "06/01/2024 12:00:00.001", "01/01/2030 00:00:00.000", ""]
        let answers = try probes.map { date in
            try api.call("/getsubscriptionstatus", ["userid": user.userID, "lastMessageDate": date]).json["responseCode"]
        }
        #expect(Set(answers) == ["UserSubscribed"], "\(answers)")
        // The device itself still hears that it missed one (v2).
        #expect(try api.call("/getsubscriptionstatusv2", [
            "userid": user.userID, "subscriptionPayload": try user.sealJSON(["pushToken": token, "lastMessageDate": "06/01/2024 11:59:59.999"]),
        ]).json["responseCode"] == "UserRecordPresentNotSubscribed")
    }

    @Test func subscriptionStatusFollowsHealthAndLastMessageDate() throws {
        let user = try api.newUser()
        let token = TestSecrets.apnsToken()
        try markSubscribed(user)
        _ = try register(user, token: token)
        let v1 = { (date: String) throws -> String? in
            try api.call("/getsubscriptionstatus", ["userid": user.userID, "lastMessageDate": date]).json["responseCode"]
        }
        let v2 = { (date: String, ignore: Int) throws -> String? in
            let payload = try user.sealJSON(["pushToken": token, "lastMessageDate": date, "ignoreLastMessageDate": ignore])
            return try api.call("/getsubscriptionstatusv2", ["userid": user.userID, "subscriptionPayload": payload]).json["responseCode"]
        }
        #expect(try v1("01/01/2020 00:00:00.000") == "UserSubscribed")
        #expect(try v2("01/01/2020 00:00:00.000", 0) == "UserSubscribed")

        // A notification was delivered after the client's last message: it missed one.
        try database.execute("""
            UPDATE Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row SET d.last_notified_at = '2024-06-01 12:00:00.000'
            WHERE s.userid = \(user.userID)
            """)
        #expect(try v2("06/01/2024 11:59:59.999", 0) == "UserRecordPresentNotSubscribed")
        #expect(try v2("06/01/2024 11:59:59.999", 1) == "UserSubscribed")
        #expect(try v2("06/01/2024 12:00:00.001", 0) == "UserSubscribed")

        // No heartbeat from Exchange for longer than 30 min + grace: unhealthy.
        try markSubscribed(user, callbackAge: 30 * 60 + 301)
        #expect(try v1("06/01/2024 12:00:00.001") == "UserRecordPresentNotSubscribed")
        #expect(try v2("06/01/2024 12:00:00.001", 1) == "UserRecordPresentNotSubscribed")

        // Unknown device (v2), unknown user, bad date.
        #expect(try v2WithToken(user, TestSecrets.apnsToken()) == "UserSubscriptionNotFound")
        #expect(try api.call("/getsubscriptionstatus",
                             ["userid": String(repeating: "2", count: 64),
                              "lastMessageDate": "01/01/2020 00:00:00.000"]).json["responseCode"] == "UserSubscriptionNotFound")
        #expect(try api.call("/getsubscriptionstatus", ["userid": user.userID, "lastMessageDate": "2020-01-01"]).status == 400)
        // Check-ins are recorded, per device (v2) and per user (v1). Responders write
        // them in batches once a second, so they land within about a second.
        let recent = { (query: Query) throws -> Bool in
            try TestStack.eventually(within: 5) { try database.queryOne(query)?.optionalInt(0) == 1 }
        }
        try database.execute("""
            UPDATE Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            SET d.last_checkin_at = '2000-01-01 00:00:00'
            WHERE s.userid = \(user.userID)
            """)
        _ = try v2("01/01/2020 00:00:00.000", 1)
        #expect(try recent("""
            SELECT d.last_checkin_at > NOW() - INTERVAL 1 MINUTE
            FROM Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.userID)
            """))
        try database.execute("UPDATE EnsSubscriptionInfo SET last_checkin_at = NULL WHERE userid = \(user.userID)")
        _ = try v1("01/01/2020 00:00:00.000")
        #expect(try recent("SELECT last_checkin_at > NOW() - INTERVAL 1 MINUTE FROM EnsSubscriptionInfo WHERE userid = \(user.userID)"))
    }

    func v2WithToken(_ user: TestUser, _ token: String) throws -> String? {
        let payload = try user.sealJSON(["pushToken": token, "lastMessageDate": "01/01/2020 00:00:00.000", "ignoreLastMessageDate": 1])
        return try api.call("/getsubscriptionstatusv2", ["userid": user.userID, "subscriptionPayload": payload]).json["responseCode"]
    }

    // MARK: /updatesynckey

    @Test func syncKeysAreStoredSealedWithTheirExpiry() throws {
        let user = try api.newUser()
        try markSubscribed(user)
        let token = TestSecrets.apnsToken()
        _ = try register(user, token: token)
        let syncKey = "fastsync-kek-\(UUID().uuidString)"
        TestSecrets.remember(syncKey)
        let update = { (token: String, expiry: String) throws -> String? in
            let info = try user.sealJSON(["apnsToken": token, "backgroundSyncKey": syncKey, "syncKeyExpirationTime": expiry])
            return try api.call("/updatesynckey", ["userid": user.userID, "info": info]).json["responseCode"]
        }
        #expect(try update(token, "01/01/2020 00:00:00.000") == "UpdateFail")
        #expect(try update(TestSecrets.apnsToken(), "01/01/2099 00:00:00.000") == "UpdateFail")
        #expect(try update(token, "01/01/2099 00:00:00.000") == "UpdateSuccess")
        let row = try database.queryOne("""
            SELECT d.sync_key_sealed, d.sync_key_expires_at FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.userID)
            """)
        let sealed = try row?.blob(0) ?? []
        #expect(!sealed.isEmpty)
        #expect(!String(decoding: sealed, as: UTF8.self).contains(syncKey))
        #expect(try row?.text(1).hasPrefix("2099-01-01 00:00:00") == true)
    }
}
