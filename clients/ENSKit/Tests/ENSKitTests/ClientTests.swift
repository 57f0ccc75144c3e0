import Foundation
import Testing
@testable import ENSKit

/// ENSClient against recorded answers: what it sends (parameters, headers, sealed
/// objects opened with the test key as ENS opens them), how it reads each documented
/// answer, and that it refuses answers ENS never sends.
struct ClientTests {
    let user = ENSUser(email: "Someone@Example.com")
    let apns = ENSPushToken.apns(String(repeating: "a1", count: 32))

    @Test func registrationSealsBoundCredentialsAndRemembersTheTag() async throws {
        let (pem, key) = try Vectors.serverKey()
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem),
                                          #"{"responseCode":"UserSubscribed","pushTag":"Ab3dEf6hIj9kLm0n","privacy":"encrypted"}"#)
        let store = MemoryKeyStore()
        let client = try makeClient(transport, keyStore: store)
        let refresh = ENSOAuthRefresh(refreshToken: "rt",
                                      tokenEndpoint: try #require(URL(string: "https://login.example.test/token")), clientID: "app")
        let result = try await runAsync {
            try await client.register(ENSRegistration(user: user, token: apns, credentials: .oauth(accessToken: "at", refresh: refresh),
                                                      privacy: .encrypted, exchangeVersion: 3))
        }
        #expect(result == ENSRegistrationResult(outcome: .subscribed, pushTag: "Ab3dEf6hIj9kLm0n", privacy: .encrypted))

        #expect(transport.requests.map(\.url.path) == ["/getpublickey", "/registerdevicev2"])
        let headers = transport.requests[1].headers
        #expect(headers["ApiToken"]?.hasPrefix("ens_") == true && headers["badge"] == "1" && headers["development"] == nil)
        let parameters = try transport.parameters(1)
        #expect(parameters["userid"] as? String == user.userID && parameters["email"] as? String == "Someone@Example.com")
        #expect(parameters["bundleid"] as? String == "com.example.mail" && parameters["exchVersion"] as? Int == 3 && parameters["force"] as? Int == 0)
        // The mode travels inside the sealed creds, never in clear.
        #expect(parameters["privacy"] == nil && parameters["privacyKey"] == nil)
        let previewKey = try #require(try client.previewKey(for: user))
        let creds = try unseal(try #require(parameters["creds"] as? String), with: key)
        #expect(creds["privacy"] as? String == "encrypted" && creds["privacyKey"] as? String == previewKey.publicKeyX963.base64EncodedString())
        #expect(creds["apnsToken"] as? String == apns.value && creds["oauthAccessToken"] as? String == "at")
        #expect(creds["oauthRefresh"] as? [String: String] == ["refreshToken": "rt",
                                                               "tokenEndpoint": "https://login.example.test/token", "clientId": "app"])
        #expect(creds["purpose"] as? String == "registerdevicev2.creds" && creds["sealedAt"] as? Int == 1_764_081_234_567)
        let secretText = try #require(creds["deviceSecret"] as? String)
        let secret = try #require(Data(base64Encoded: secretText))
        #expect(secret.count == 32)
        #expect(Set(creds.keys) == ["apnsToken", "oauthAccessToken", "oauthRefresh", "deviceSecret", "privacy", "privacyKey", "purpose", "sealedAt"])

        #expect(try client.user(forPushTag: "Ab3dEf6hIj9kLm0n") == ENSUser(userID: user.userID))
        #expect(try client.registeredToken(for: user) == apns)
    }

    /// A Dovecot mailbox: its IMAP server beside a user name and password, and nothing
    /// else (ENS refuses the rest as a sealed-parameter failure; ENSKit says so first).
    @Test func aDovecotMailboxSendsItsIMAPServer() async throws {
        let (pem, key) = try Vectors.serverKey()
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem), #"{"responseCode":"UserSubscribed"}"#)
        let client = try makeClient(transport)
        let imap = try #require(URL(string: "imaps://imap.example.com:993/"))
        let result = try await runAsync {
            try await client.register(ENSRegistration(user: user, token: apns,
                                                      credentials: .password(userName: "someone@example.com", password: "pw"),
                                                      imapURL: imap))
        }
        #expect(result.outcome == .subscribed)
        let creds = try unseal(try #require(try transport.parameters(1)["creds"] as? String), with: key)
        #expect(creds["imapUrl"] as? String == "imaps://imap.example.com:993/" && creds["userName"] as? String == "someone@example.com")
        #expect(creds["ewsUrl"] == nil)
        for registration in [
            ENSRegistration(user: user, token: apns, credentials: .oauth(accessToken: "at"), imapURL: imap),
            ENSRegistration(user: user, token: apns, credentials: .password(userName: "u", password: "p"),
                            ewsURL: URL(string: "https://mail.example.com/EWS/Exchange.asmx"), imapURL: imap),
            ENSRegistration(user: user, token: apns, credentials: .password(userName: "u", password: "p"),
                            imapURL: URL(string: "https://imap.example.com/")),
        ] {
            await #expect(throws: ENSError.self) { try await client.register(registration) }
        }
    }

    @Test func eachCredentialKindSealsItsMembers() throws {
        let pkcs12 = Data([0x30, 0x82, 0x01, 0x02])
        let cases: [(ENSCredentials, [String: Any])] = [
            (.password(userName: "someone", password: "pw"), ["userName": "someone", "password": "pw"]),
            (.certificate(pkcs12: pkcs12, password: "p12"), ["CBAData": ["certificate": pkcs12.base64EncodedString(), "password": "p12"]]),
            (.graph(accessToken: "eyJ0"), ["graphAccessToken": "eyJ0"]),
            (.oauth(accessToken: "at"), ["oauthAccessToken": "at"]),
        ]
        for (credentials, expected) in cases {
            let members = try jsonObject(try WireJSON.encode(try credentials.members()))
            #expect(NSDictionary(dictionary: members).isEqual(to: expected), "\(credentials)")
            #expect(!"\(credentials)".contains("pw") && !"\(credentials)".contains("eyJ0"))
        }
        let http = ENSOAuthRefresh(refreshToken: "rt", tokenEndpoint: try #require(URL(string: "http://login.example.test/token")), clientID: "app")
        #expect(throws: ENSError.self) { try ENSCredentials.oauth(accessToken: "at", refresh: http).members() }
    }

    @Test func businessFailuresAreTypedErrors() async throws {
        let (pem, _) = try Vectors.serverKey()
        for (answer, expected) in [
            (#"{"responseCode":"ExchangeAuthFailed","message":"Exchange refused the credentials."}"#,
             ENSError.exchangeAuthFailed(message: "Exchange refused the credentials.")),
            (#"{"responseCode":"AutodiscoverFailed","message":"No Exchange."}"#, .autodiscoverFailed(message: "No Exchange.")),
            (#"{"responseCode":"ExchangeError","message":"Subscribe failed."}"#, .exchangeError(message: "Subscribe failed.")),
            // An answer ENS never sends to a registration.
            (#"{"responseCode":"UpdateSuccess"}"#, .unexpectedAnswer(status: 200, responseCode: "UpdateSuccess")),
            // An answer with a member of the wrong form: the error names it.
            (#"{"responseCode":"UserSubscribed","pushTag":"short"}"#,
             .malformedAnswer(status: 200, responseCode: "UserSubscribed", "'pushTag' is malformed")),
            (#"{"responseCode":"UserSubscribed","privacy":"loud"}"#,
             .malformedAnswer(status: 200, responseCode: "UserSubscribed", "'privacy' is malformed")),
            (#"{"responseCode":"UserSubscribed","pushTag":16}"#,
             .malformedAnswer(status: 200, responseCode: "UserSubscribed", "'pushTag' has the wrong type")),
            (#"<html>oops</html>"#, .unexpectedAnswer(status: 200, responseCode: nil)),
        ] {
            let client = try makeClient(RecordedTransport(json: try publicKeyAnswer(user, pem), answer))
            await #expect(throws: expected) {
                try await client.register(ENSRegistration(user: user, token: apns, credentials: .password(userName: "u", password: "p")))
            }
        }
    }

    @Test func statusesMapToTheirErrors() async throws {
        let cases: [(Int, [String: String], String, ENSError)] = [
            (400, [:], #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#, .invalidRequest),
            (401, [:], #"{"responseCode":"Unauthorized","message":"A valid ApiToken header is required."}"#, .unauthorized),
            (404, [:], #"{"responseCode":"NotFound","message":"No such endpoint."}"#, .notFound),
            (413, [:], #"{"responseCode":"PayloadTooLarge","message":"The request body is too large."}"#, .payloadTooLarge),
            (500, [:], #"{"responseCode":"InternalError","message":"The server could not complete the request."}"#, .internalError),
            (429, ["Retry-After": "900"], #"{"responseCode":"TooManyRequests","message":"Too many."}"#, .tooManyRequests(retryAfter: .seconds(900))),
            (503, ["Retry-After": "120"], #"{"responseCode":"ServiceUnavailable","message":"Later."}"#,
             .serviceUnavailable(retryAfter: .seconds(120))),
            (400, [:], "<html>400 Bad Request</html>", .unexpectedAnswer(status: 400, responseCode: nil)),
            (418, [:], #"{"responseCode":"Teapot"}"#, .unexpectedAnswer(status: 418, responseCode: "Teapot")),
            (200, [:], #"{"responseCode":"Unauthorized"}"#, .unexpectedAnswer(status: 200, responseCode: "Unauthorized")),
        ]
        for (status, headers, body, expected) in cases {
            let client = try makeClient(RecordedTransport([(status, headers, body)]))
            await #expect(throws: expected) { try await client.checkInV1(user: user) }
        }
    }

    /// Apps act on the code: a `switch` over an ENSError matches codes, whatever else the
    /// error carries, and what ENS said comes along (status, responseCode, Retry-After).
    @Test func errorsAreMatchedByTheirCode() async throws {
        let busy = RecordedTransport([(429, ["Retry-After": "900"], #"{"responseCode":"TooManyRequests","message":"Too many."}"#)])
        let client = try makeClient(busy, retry: .none)
        do {
            _ = try await client.checkInV1(user: user)
            Issue.record("a 429 was not an error")
        } catch {
            switch error {
            case .serviceUnavailable: Issue.record("429 matched as 503")
            case .tooManyRequests:
                #expect(error.retryAfter == .seconds(900) && error.status == 429 && error.responseCode == "TooManyRequests")
            default: Issue.record("\(error)")
            }
            #expect(error.code == .tooManyRequests && error.code.name == "tooManyRequests")
            #expect("\(error)" == "ENSError.tooManyRequests: status 429: TooManyRequests: retry after 900.0 seconds")
        }
        let refused = ENSError.transport(ENSTransportError("connection refused"))
        #expect(refused.code == .transport && refused.underlying is ENSTransportError && "\(refused)".hasSuffix("connection refused"))
        let anyError: any Error = refused
        switch anyError {
        case ENSError.Code.keyStore: Issue.record("transport matched as keyStore")
        case ENSError.Code.transport: break
        default: Issue.record("\(anyError)")
        }
    }

    /// 429 and 503 are retried after `Retry-After` (or the default backoff), within the
    /// policy's limits; a longer wait is left to the caller.
    @Test func retriesHonourRetryAfter() async throws {
        let busy = #"{"responseCode":"ServiceUnavailable","message":"Later."}"#
        let sleeps = Sleeps()
        let transport = RecordedTransport([(503, ["Retry-After": "7"], busy), (503, [:], busy), (200, [:], #"{"responseCode":"UserSubscribed"}"#)])
        let result = try await makeClient(transport,
            sleeps: sleeps, retry: ENSRetryPolicy(maximumRetries: 2, maximumDelay: .seconds(30), defaultDelay: .seconds(1)))
            .checkInV1(user: user)
        #expect(result.action == .nothing)
        #expect(sleeps.all == [.seconds(7), .seconds(2)])
        #expect(transport.requests.count == 3)

        let patient = Sleeps()
        let tooLong = RecordedTransport([(429, ["Retry-After": "900"], #"{"responseCode":"TooManyRequests","message":"x"}"#)])
        await #expect(throws: ENSError.tooManyRequests(retryAfter: .seconds(900))) { try await makeClient(tooLong,
            sleeps: patient).checkInV1(user: user) }
        #expect(patient.all.isEmpty)

        let none = RecordedTransport([(503, ["Retry-After": "1"], busy)])
        await #expect(throws: ENSError.serviceUnavailable(retryAfter: .seconds(1))) { try await makeClient(none, retry: .none).checkInV1(user: user) }

        let date = Date(timeIntervalSince1970: 1_764_081_294)  // testTime + 59.4 s
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        #expect(ENSClient.retryAfter(formatter.string(from: date), now: testTime) == .seconds(60))
        #expect(ENSClient.retryAfter("-3", now: testTime) == nil)
    }

    @Test func checkInAnswersWhatToDoNext() async throws {
        let (pem, key) = try Vectors.serverKey()
        let store = MemoryKeyStore()
        let newToken = ENSPushToken.apns(String(repeating: "b2", count: 32))
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem), #"{"responseCode":"UserSubscribed","pushTag":"Ab3dEf6hIj9kLm0n"}"#,
                                          #"{"responseCode":"UserSubscribed"}"#,
                                          #"{"responseCode":"UserSubscribed"}"#,
                                          #"{"responseCode":"UserRecordPresentNotSubscribed"}"#,
                                          #"{"responseCode":"UserSubscriptionNotFound"}"#,
                                          #"{"responseCode":"UserSubscribed","credentials":"Unused"}"#,
                                          #"{"responseCode":"UserSubscribed","credentials":"Sometimes"}"#,
                                          #"{"responseCode":"UpdateSuccess"}"#)
        let client = try makeClient(transport, keyStore: store)
        _ = try await client.register(ENSRegistration(user: user, token: apns, credentials: .password(userName: "u", password: "p")))

        #expect(try await client.checkIn(user: user, token: apns, lastNotificationTimestamp: 1_764_081_000_000).action == .nothing)
        let payload = try unseal(try #require(try transport.parameters(2)["subscriptionPayload"] as? String), with: key)
        #expect(payload["pushToken"] as? String == apns.value && payload["lastNotificationTs"] as? Int == 1_764_081_000_000)
        #expect(payload["purpose"] as? String == "getsubscriptionstatusv2.subscriptionPayload")

        // The OS gave a new token: check in with the registered one, and say so.
        #expect(try await client.checkIn(user: user, token: newToken).action == .updateToken(registered: apns))
        let ignoring = try unseal(try #require(try transport.parameters(3)["subscriptionPayload"] as? String), with: key)
        #expect(ignoring["pushToken"] as? String == apns.value && ignoring["ignoreLastMessageDate"] as? Int == 1)

        #expect(try await client.checkIn(user: user, token: apns).action == .registerAgain(.notSubscribed))
        #expect(try await client.checkIn(user: user, token: apns).action == .registerAgain(.notFound))
        let unused = try await client.checkIn(user: user, token: apns, credentials: .password(userName: "u", password: "new"))
        #expect(unused == ENSCheckInResult(action: .registerAgain(.credentialsUnused), credentials: .unused))
        let creds = try unseal(try #require(try transport.parameters(6)["creds"] as? String), with: key)
        #expect(creds["password"] as? String == "new" && creds["apnsToken"] == nil && creds["purpose"] as? String == "getsubscriptionstatusv2.creds")
        await #expect(throws: ENSError.malformedAnswer(status: 200, responseCode: "UserSubscribed", "'credentials' is malformed")) {
            try await client.checkIn(user: user, token: apns, credentials: .password(userName: "u", password: "new"))
        }

        try await client.updateDevice(user: user, from: apns, to: newToken)
        let update = try unseal(try #require(try transport.parameters(8)["token"] as? String), with: key)
        #expect(update["oldApnsToken"] as? String == apns.value && update["apnsToken"] as? String == newToken.value)
        #expect(update["purpose"] as? String == "updatedevice.token")
        #expect(try client.registeredToken(for: user) == newToken)
    }

    /// A state-changing sealed value is spent once ENS opened it, whatever the answer:
    /// a retry after 503 carries one sealed anew, with a later `sealedAt` even when the
    /// clock did not move, so ENS does not refuse it as a replay.
    @Test func aRetrySealsItsValueAgain() async throws {
        let (pem, key) = try Vectors.serverKey()
        let busy = #"{"responseCode":"ServiceUnavailable","message":"Later."}"#
        let transport = RecordedTransport([(200, [:], try publicKeyAnswer(user, pem)), (503, ["Retry-After": "1"], busy),
                                           (200, [:], #"{"responseCode":"DeviceUnregistered"}"#)])
        let client = try makeClient(transport)
        try await runAsync { try await client.unregister(user: user, token: apns) }
        #expect(transport.requests.map(\.url.path) == ["/getpublickey", "/unregister", "/unregister"])
        let first = try unseal(try #require(try transport.parameters(1)["token"] as? String), with: key)
        let second = try unseal(try #require(try transport.parameters(2)["token"] as? String), with: key)
        #expect(first["purpose"] as? String == "unregister.token" && second["purpose"] as? String == "unregister.token")
        let (firstAt, secondAt) = (try #require(first["sealedAt"] as? Int), try #require(second["sealedAt"] as? Int))
        #expect(secondAt > firstAt)
    }

    /// Two calls in the same millisecond seal two times: ENS spends a chunked value by
    /// its use, device and `sealedAt`, so one time for two calls would refuse the second.
    @Test func twoCallsInOneMillisecondSealTwoTimes() async throws {
        let (pem, key) = try Vectors.serverKey()
        let updated = #"{"responseCode":"UpdateSuccess"}"#
        let transport = RecordedTransport([(200, [:], try publicKeyAnswer(user, pem)), (200, [:], updated), (200, [:], updated)])
        let client = try makeClient(transport)
        let expiration = Date(timeIntervalSince1970: 4_102_444_800)
        try await client.updateSyncKey(user: user, token: apns, key: "one", expiration: expiration)
        try await client.updateSyncKey(user: user, token: apns, key: "two", expiration: expiration)
        var times: [Int] = []
        for index in [1, 2] {
            let info = try #require(try transport.parameters(index)["info"] as? String)
            times.append(try #require(try unseal(info, with: key)["sealedAt"] as? Int))
        }
        #expect(times[1] == times[0] + 1, "\(times)")
    }

    /// A key whose answer says ENS opens envelopes (`ENS-Sealing: e1`) gets envelopes
    /// from then on. If one reaches a host that does not (a cluster in a rolling
    /// upgrade: its 400), the key is fetched again and, answered without the header,
    /// the value goes chunked.
    @Test func envelopesGoWhereTheKeysAnswerNamesThem() async throws {
        let (pem, key) = try Vectors.serverKey()
        let store = MemoryKeyStore()
        let expiration = Date(timeIntervalSince1970: 4_102_444_800)
        let updated = #"{"responseCode":"UpdateSuccess"}"#
        let transport = RecordedTransport([(200, ["ENS-Sealing": "e1"], try publicKeyAnswer(user, pem)), (200, [:], updated)])
        try await makeClient(transport, keyStore: store).updateSyncKey(user: user, token: apns, key: "kek", expiration: expiration)
        let sealed = try #require(try transport.parameters(1)["info"] as? String)
        #expect(sealed.hasPrefix("e1:"))
        #expect(try unseal(sealed, with: key)["purpose"] as? String == "updatesynckey.info")

        let upgrading = RecordedTransport([(400, [:], #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#),
                                           (200, [:], try publicKeyAnswer(user, pem)), (200, [:], updated)])
        try await makeClient(upgrading, keyStore: store).updateSyncKey(user: user, token: apns, key: "kek", expiration: expiration)
        #expect(upgrading.requests.map(\.url.path) == ["/updatesynckey", "/getpublickey", "/updatesynckey"])
        #expect(try #require(try upgrading.parameters(0)["info"] as? String).hasPrefix("e1:"))
        let chunked = try #require(try upgrading.parameters(2)["info"] as? String)
        #expect(!chunked.hasPrefix("e1:") && Data(base64Encoded: chunked)?.count == 256)
        #expect(try unseal(chunked, with: key)["purpose"] as? String == "updatesynckey.info")
    }

    /// A value sealed under a key ENS no longer has gets a 400; ENSKit fetches the key
    /// again and, since it changed, seals anew under the new one.
    @Test func aStaleKeyIsRefreshed() async throws {
        let (oldPEM, _) = try Vectors.serverKey("first")
        let (newPEM, newKey) = try Vectors.serverKey("second")
        let store = MemoryKeyStore()
        let client = try makeClient(RecordedTransport(json: try publicKeyAnswer(user, oldPEM)), keyStore: store)
        try await client.getPublicKey(for: user)
        let transport = RecordedTransport([(400, [:], #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#),
                                           (200, [:], try publicKeyAnswer(user, newPEM)), (200, [:], #"{"responseCode":"UpdateSuccess"}"#)])
        let refreshed = try makeClient(transport, keyStore: store)
        try await refreshed.updateSyncKey(user: user, token: apns, key: "kek", expiration: Date(timeIntervalSince1970: 4_102_444_800))
        let info = try unseal(try #require(try transport.parameters(2)["info"] as? String), with: newKey)
        #expect(info["backgroundSyncKey"] as? String == "kek" && info["syncKeyExpirationTime"] as? String == "01/01/2100 00:00:00.000")
        #expect(info["purpose"] as? String == "updatesynckey.info")

        // The same key again: the 400 is the caller's.
        let same = RecordedTransport([(400, [:], #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#),
                                      (200, [:], try publicKeyAnswer(user, newPEM))])
        await #expect(throws: ENSError.invalidRequest) {
            try await makeClient(same, keyStore: store).updateSyncKey(user: user, token: apns, key: "kek",
                                                                      expiration: Date(timeIntervalSince1970: 4_102_444_800))
        }
    }

    /// A registration for a record that went away fetches the new record's key and
    /// registers once more.
    @Test func aRecordThatWentAwayIsMadeAgain() async throws {
        let (oldPEM, _) = try Vectors.serverKey("first")
        let (newPEM, newKey) = try Vectors.serverKey("second")
        let store = MemoryKeyStore()
        try store.set(Data(oldPEM.utf8), for: .serverKey("ens.example.test", user.userID))
        let transport = RecordedTransport(json: #"{"responseCode":"UserSubscriptionNotFound"}"#, try publicKeyAnswer(user, newPEM),
                                          #"{"responseCode":"UserSubscribed","pushTag":"Ab3dEf6hIj9kLm0n"}"#)
        let result = try await makeClient(transport, keyStore: store)
            .register(ENSRegistration(user: user, token: apns, credentials: .graph(accessToken: "eyJ0")))
        #expect(result.outcome == .subscribed)
        #expect(transport.requests.map(\.url.path) == ["/registerdevicev2", "/getpublickey", "/registerdevicev2"])
        #expect(try unseal(try #require(try transport.parameters(2)["creds"] as? String), with: newKey)["graphAccessToken"] as? String == "eyJ0")
    }

    @Test func privateOperationsProveTheDeviceSecret() async throws {
        let (pem, key) = try Vectors.serverKey()
        let id = "0123456789abcdef0123456789abcdef"
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem), #"{"responseCode":"UserSubscribed","pushTag":"Ab3dEf6hIj9kLm0n"}"#,
            #"{"responseCode":"UpdateSuccess","privacy":"secure"}"#,
            #"{"id":"0123456789abcdef0123456789abcdef","content":{"sender":"Ann Example","subject":"Lunch?","badge":3},"# +
            #""responseCode":"NotificationFound"}"#,
            #"{"responseCode":"NotificationNotFound"}"#,
            #"{"notifications":[{"id":"0123456789abcdef0123456789abcdef","ts":1764081234567,"sender":"Ann Example","subject":"Lunch?","read":0}],"# +
            #""responseCode":"NotificationHistory"}"#,
            #"{"marked":1,"responseCode":"UpdateSuccess"}"#,
            #"{"id":"ffffffffffffffffffffffffffffffff","content":{"sender":"x","subject":"y"},"responseCode":"NotificationFound"}"#,
            #"{"responseCode":"UpdateFail"}"#)
        let client = try makeClient(transport)
        await #expect(throws: ENSError.noDeviceSecret) { try await client.updatePrivacy(user: user, token: apns, mode: .secure) }
        _ = try await client.register(ENSRegistration(user: user, token: apns, credentials: .password(userName: "u", password: "p")))
        let secret = try unseal(try #require(try transport.parameters(1)["creds"] as? String), with: key)["deviceSecret"] as? String

        #expect(try await client.updatePrivacy(user: user, token: apns, mode: .secure) == .secure)
        let info = try unseal(try #require(try transport.parameters(2)["info"] as? String), with: key)
        #expect(info["deviceSecret"] as? String == secret && info["pushToken"] as? String == apns.value && info["privacy"] as? String == "secure")
        #expect(info["purpose"] as? String == "updateprivacy.info")

        #expect(try await client.getNotification(user: user, token: apns, id: id) == ENSNotificationContent(sender: "Ann Example",
            subject: "Lunch?", badge: 3))
        #expect(try await client.getNotification(user: user, token: apns, id: id) == nil)
        let history = try await client.getNotificationHistory(user: user, token: apns, limit: 10)
        #expect(history == [ENSHistoryEntry(id: id, timestamp: 1_764_081_234_567, sender: "Ann Example", subject: "Lunch?", isRead: false)])
        #expect(try await client.markNotificationsRead(user: user, token: apns, ids: [id]) == 1)
        // Content for another id than asked: refused.
        await #expect(throws: ENSError.malformedAnswer(status: 200, responseCode: "NotificationFound", "'id' is not the one asked for")) {
            try await client.getNotification(user: user, token: apns, id: id)
        }
        await #expect(throws: ENSError.updateFailed) { try await client.updatePrivacy(user: user, token: apns, mode: .generic) }
        await #expect(throws: ENSError.self) { try await client.getNotification(user: user, token: apns, id: "nope") }
    }

    @Test func unregisterForgetsTheDevice() async throws {
        let (pem, key) = try Vectors.serverKey()
        let store = MemoryKeyStore()
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem), #"{"responseCode":"UserSubscribed","pushTag":"Ab3dEf6hIj9kLm0n"}"#,
                                          #"{"responseCode":"DeviceUnregistered"}"#)
        let client = try makeClient(transport, keyStore: store)
        _ = try await client.register(ENSRegistration(user: user, token: apns,
                                                      credentials: .password(userName: "u", password: "p"), privacy: .encrypted))
        try await client.unregister(user: user, token: apns)
        let token = try unseal(try #require(try transport.parameters(2)["token"] as? String), with: key)
        #expect(token["apnsToken"] as? String == apns.value && token["purpose"] as? String == "unregister.token")
        #expect(try client.user(forPushTag: "Ab3dEf6hIj9kLm0n") == nil)
        #expect(try client.previewKey(for: user) == nil)
        #expect(try client.deviceSecret(for: user.userID, creating: false) == nil)
    }

    @Test func tokensAreValidated() throws {
        #expect(try ENSPushToken(apnsHex: "<A1B2C3D4 E5F60718 A1B2C3D4 E5F60718>") == .apns("a1b2c3d4e5f60718a1b2c3d4e5f60718"))
        #expect(throws: ENSError.self) { try ENSPushToken(apnsHex: "xyz") }
        #expect(try ENSPushToken(fcmToken: "dEmO1234:APA91b_-abcdefghij").wireForm == "fcm:dEmO1234:APA91b_-abcdefghij")
        #expect(throws: ENSError.self) { try ENSPushToken(fcmToken: "short") }
        #expect(!"\(ENSPushToken.apns("a1b2c3d4e5f60718"))".contains("a1b2"))
    }
}

/// Runs an async throwing closure (keeps the test bodies readable where a result is
/// compared).
func runAsync<T>(_ body: () async throws -> T) async rethrows -> T { try await body() }
