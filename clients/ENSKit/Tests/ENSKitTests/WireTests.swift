import Foundation
import Testing
@testable import ENSKit

/// ENSKit's wire models against the contract (docs/api.md, docs/openapi.yaml): each
/// request body and sealed object encodes to the JSON the contract names, byte for byte
/// (keys sorted) and as an independent encoder (Python's json) writes the documented
/// example; each answer decodes from the documented example, ignores members it does
/// not know, and a member it needs that is missing or ill-typed is an error naming it.
struct WireTests {
    static let userID = "72497f475e4f76d0b28f57c73a084ece576d170874eba3ee2609d9afe4b71aab"
    static let hex = String(repeating: "a1", count: 32)
    static let fcm = "fcmTokenABCDEFGHIJKL:0123-_"
    static let sealedAt: Int64 = 1_764_081_234_567

    func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try WireJSON.encode(value), as: UTF8.self)
    }

    func bound<T: Encodable>(_ payload: T, _ purpose: String) throws -> String {
        try json(Bound(payload: payload, purpose: purpose, sealedAt: Self.sealedAt))
    }

    // MARK: Requests

    @Test func requestBodiesAreTheContractsParameters() throws {
        let user = Self.userID
        #expect(try json(PublicKeyRequest(userid: user, email: "someone@example.com")) == #"{"email":"someone@example.com","userid":"\#(user)"}"#)
        #expect(try json(PublicKeyRequest(userid: user, email: nil)) == #"{"userid":"\#(user)"}"#)
        // docs/api.md's JSON body for /registerdevicev2, with every optional parameter.
        #expect(try json(RegistrationRequest(userid: user, email: "someone@example.com", bundleid: "com.example.mail", force: 1, exchVersion: 1,
                                             defaultSound: "default", ewsDeviceId: "ABCDEF0123", privacyCertificate: "MIIC", creds: "c2VhbGVk"))
                == #"{"bundleid":"com.example.mail","creds":"c2VhbGVk","defaultSound":"default","email":"someone@example.com","# +
                   #""ewsDeviceId":"ABCDEF0123","exchVersion":1,"force":1,"privacyCertificate":"MIIC","userid":"\#(user)"}"#)
        #expect(try json(RegistrationRequest(userid: user, email: "someone@example.com", bundleid: "com.example.mail", force: 0, exchVersion: nil,
                                             defaultSound: nil, ewsDeviceId: nil, privacyCertificate: nil, creds: "c2VhbGVk"))
                == #"{"bundleid":"com.example.mail","creds":"c2VhbGVk","email":"someone@example.com","force":0,"userid":"\#(user)"}"#)
        #expect(try json(CheckInV1Request(userid: user)) == #"{"userid":"\#(user)"}"#)
        #expect(try json(CheckInRequest(userid: user, email: nil, subscriptionPayload: "cA==", creds: nil))
                == #"{"subscriptionPayload":"cA==","userid":"\#(user)"}"#)
        #expect(try json(CheckInRequest(userid: user, email: "someone@example.com", subscriptionPayload: "cA==", creds: "Yw=="))
                == #"{"creds":"Yw==","email":"someone@example.com","subscriptionPayload":"cA==","userid":"\#(user)"}"#)
        #expect(try json(SealedTokenRequest(userid: user, token: "dA==")) == #"{"token":"dA==","userid":"\#(user)"}"#)
        #expect(try json(SealedInfoRequest(userid: user, info: "aQ==")) == #"{"info":"aQ==","userid":"\#(user)"}"#)
        #expect(try json(SealedInfoRequest(userid: user, info: "aQ==", privacyCertificate: "MIIC"))
                == #"{"info":"aQ==","privacyCertificate":"MIIC","userid":"\#(user)"}"#)
    }

    @Test func sealedObjectsAreTheContractsPlaintexts() throws {
        let hex = Self.hex
        let apns = try ENSPushToken(apnsHex: hex)
        let fcm = try ENSPushToken(fcmToken: Self.fcm)
        // /registerdevicev2's creds, as docs/api.md's bound example.
        var creds = RegistrationCreds(credentials: try ENSCredentials.oauth(accessToken: "<token>").members(), token: TokenMember(apns))
        creds.deviceSecret = "<base64>"
        creds.privacy = "encrypted"
        creds.privacyKey = "BGx0...=="
        #expect(try bound(creds, "registerdevicev2.creds")
                == #"{"apnsToken":"\#(hex)","deviceSecret":"<base64>","oauthAccessToken":"<token>","privacy":"encrypted","privacyKey":"BGx0...==","# +
                   #""purpose":"registerdevicev2.creds","sealedAt":1764081234567}"#)
        // Every way of signing in, an FCM token, the mailbox's servers, blind.
        let refresh = ENSOAuthRefresh(refreshToken: "rt",
                                      tokenEndpoint: try #require(URL(string: "https://login.example.test/t/token")), clientID: "app",
                                      scope: "EWS.AccessAsUser.All offline_access")
        var full = RegistrationCreds(credentials: try ENSCredentials.oauth(accessToken: "at", refresh: refresh).members(), token: TokenMember(fcm))
        full.ewsUrl = "https://mail.example.com/EWS/Exchange.asmx"
        #expect(try json(full)
                == #"{"ewsUrl":"https://mail.example.com/EWS/Exchange.asmx","fcmToken":"\#(Self.fcm)","oauthAccessToken":"at","# +
                   #""oauthRefresh":{"clientId":"app","refreshToken":"rt","scope":"EWS.AccessAsUser.All offline_access","# +
                   #""tokenEndpoint":"https://login.example.test/t/token"}}"#)
        var dovecot = RegistrationCreds(credentials: try ENSCredentials.password(userName: "someone@example.com", password: "pw").members(),
                                        token: TokenMember(apns))
        dovecot.imapUrl = "imaps://imap.example.com:993/"
        #expect(try json(dovecot) == #"{"apnsToken":"\#(hex)","imapUrl":"imaps://imap.example.com:993/","password":"pw","# +
                                     #""userName":"someone@example.com"}"#)
        let certificate = RegistrationCreds(credentials: try ENSCredentials.certificate(pkcs12: Data([1, 2, 3]), password: "p12").members(),
                                            token: TokenMember(apns))
        #expect(try json(certificate) == #"{"CBAData":{"certificate":"AQID","password":"p12"},"apnsToken":"\#(hex)"}"#)
        var blind = RegistrationCreds(credentials: try ENSCredentials.graph(accessToken: "eyJ0").members(), token: TokenMember(apns))
        blind.privacy = "blind"
        blind.privacyCertificateSHA256 = String(repeating: "0f", count: 32)
        #expect(try json(blind) == #"{"apnsToken":"\#(hex)","graphAccessToken":"eyJ0","privacy":"blind","# +
                                   #""privacyCertificateSHA256":"\#(String(repeating: "0f", count: 32))"}"#)

        // /getsubscriptionstatusv2: the payload in its three forms, and new credentials.
        #expect(try bound(CheckInPayload(pushToken: hex, ignoreLastMessageDate: 1), "getsubscriptionstatusv2.subscriptionPayload")
                == #"{"ignoreLastMessageDate":1,"purpose":"getsubscriptionstatusv2.subscriptionPayload","pushToken":"\#(hex)","# +
                   #""sealedAt":1764081234567}"#)
        #expect(try json(CheckInPayload(pushToken: "fcm:" + Self.fcm, lastNotificationTs: 1_764_081_234_567))
                == #"{"lastNotificationTs":1764081234567,"pushToken":"fcm:\#(Self.fcm)"}"#)
        #expect(try json(CheckInPayload(pushToken: hex, lastMessageDate: "11/22/2026 13:05:00.000"))
                == #"{"lastMessageDate":"11/22/2026 13:05:00.000","pushToken":"\#(hex)"}"#)
        let checkInCreds = CheckInCreds(credentials: try ENSCredentials.password(userName: "someone@example.com",
                                                                                 password: "<new password>").members(),
                                        deviceSecret: "<base64>")
        #expect(try bound(checkInCreds, "getsubscriptionstatusv2.creds")
                == #"{"deviceSecret":"<base64>","password":"<new password>","purpose":"getsubscriptionstatusv2.creds","sealedAt":1764081234567,"# +
                   #""userName":"someone@example.com"}"#)

        // The token objects and the info objects.
        #expect(try bound(UnregisterToken(token: TokenMember(apns), deviceSecret: "<base64>"), "unregister.token")
                == #"{"apnsToken":"\#(hex)","deviceSecret":"<base64>","purpose":"unregister.token","sealedAt":1764081234567}"#)
        #expect(try json(UnregisterToken(token: TokenMember(fcm), deviceSecret: nil)) == #"{"fcmToken":"\#(Self.fcm)"}"#)
        let old = try ENSPushToken(apnsHex: String(repeating: "b2", count: 32))
        #expect(try bound(UpdateDeviceToken(old: OldTokenMember(old), new: TokenMember(apns), deviceSecret: "<base64>"), "updatedevice.token")
                == #"{"apnsToken":"\#(hex)","deviceSecret":"<base64>","oldApnsToken":"\#(String(repeating: "b2", count: 32))","# +
                   #""purpose":"updatedevice.token","sealedAt":1764081234567}"#)
        #expect(try json(UpdateDeviceToken(old: OldTokenMember(fcm), new: TokenMember(fcm), deviceSecret: nil))
                == #"{"fcmToken":"\#(Self.fcm)","oldFcmToken":"\#(Self.fcm)"}"#)
        #expect(try bound(SyncKeyInfo(token: TokenMember(apns), backgroundSyncKey: "<key>", syncKeyExpirationTime: "12/22/2026 00:00:00.000",
                                      deviceSecret: "<base64>"), "updatesynckey.info")
                == #"{"apnsToken":"\#(hex)","backgroundSyncKey":"<key>","deviceSecret":"<base64>","purpose":"updatesynckey.info","# +
                   #""sealedAt":1764081234567,"syncKeyExpirationTime":"12/22/2026 00:00:00.000"}"#)
        #expect(try bound(PrivacyInfo(pushToken: hex, deviceSecret: "<base64>", privacy: "encrypted", privacyKey: "BGx0...=="), "updateprivacy.info")
                == #"{"deviceSecret":"<base64>","privacy":"encrypted","privacyKey":"BGx0...==","purpose":"updateprivacy.info","# +
                   #""pushToken":"\#(hex)","sealedAt":1764081234567}"#)
        #expect(try json(PrivacyInfo(pushToken: hex, deviceSecret: "s", privacy: "blind", privacyCertificateSHA256: "ab"))
                == #"{"deviceSecret":"s","privacy":"blind","privacyCertificateSHA256":"ab","pushToken":"\#(hex)"}"#)
        let id = String(repeating: "0123456789abcdef", count: 2)
        #expect(try bound(NotificationInfo(pushToken: hex, deviceSecret: "<base64>", id: id), "getnotification.info")
                == #"{"deviceSecret":"<base64>","id":"\#(id)","purpose":"getnotification.info","pushToken":"\#(hex)","sealedAt":1764081234567}"#)
        #expect(try bound(HistoryInfo(pushToken: hex, deviceSecret: "<base64>", limit: 10), "getnotificationhistory.info")
                == #"{"deviceSecret":"<base64>","limit":10,"purpose":"getnotificationhistory.info","pushToken":"\#(hex)","sealedAt":1764081234567}"#)
        #expect(try json(HistoryInfo(pushToken: hex, deviceSecret: "s", limit: nil)) == #"{"deviceSecret":"s","pushToken":"\#(hex)"}"#)
        #expect(try bound(MarkReadInfo(pushToken: hex, deviceSecret: "<base64>", ids: [id]), "marknotificationsread.info")
                == #"{"deviceSecret":"<base64>","ids":["\#(id)"],"purpose":"marknotificationsread.info","pushToken":"\#(hex)","# +
                   #""sealedAt":1764081234567}"#)
    }

    /// Python's json module writes docs/api.md's documented plaintexts and body (keys
    /// sorted, no spaces, UTF-8): ENSKit's encoding of the same values is the same bytes,
    /// and the same object member by member.
    @Test(.enabled(if: Python.available, "needs python3"))
    func pythonWritesTheDocumentedExamplesAlike() throws {
        let hex = Self.hex
        let apns = try ENSPushToken(apnsHex: hex)
        var creds = RegistrationCreds(credentials: try ENSCredentials.password(userName: "Zoë@example.com", password: "p/w \"quoted\"").members(),
                                      token: TokenMember(apns))
        creds.deviceSecret = "q+/=="
        creds.privacy = "encrypted"
        creds.privacyKey = "BGx0...=="
        creds.ewsUrl = "https://mail.example.com/EWS/Exchange.asmx"
        let cases: [(String, String)] = [
            (try bound(creds, "registerdevicev2.creds"),
             #"{"apnsToken": "\#(hex)", "userName": "Zoë@example.com", "password": "p/w \"quoted\"", "deviceSecret": "q+/==","# +
             #" "privacy": "encrypted", "privacyKey": "BGx0...==", "ewsUrl": "https://mail.example.com/EWS/Exchange.asmx","# +
             #" "purpose": "registerdevicev2.creds", "sealedAt": 1764081234567}"#),
            (try bound(CheckInPayload(pushToken: hex, ignoreLastMessageDate: 1), "getsubscriptionstatusv2.subscriptionPayload"),
             #"{"pushToken": "\#(hex)", "ignoreLastMessageDate": 1, "purpose": "getsubscriptionstatusv2.subscriptionPayload","# +
             #" "sealedAt": 1764081234567}"#),
            (try json(RegistrationRequest(userid: Self.userID, email: "someone@example.com", bundleid: "com.example.mail", force: 1, exchVersion: 1,
                                          defaultSound: nil, ewsDeviceId: nil, privacyCertificate: nil, creds: "c2Vh+bGVk/w==")),
             #"{"userid": "\#(Self.userID)", "email": "someone@example.com", "creds": "c2Vh+bGVk/w==", "bundleid": "com.example.mail","# +
             #" "exchVersion": 1, "force": 1}"#),
        ]
        for (ours, documented) in cases {
            let python = try Python.run("import json, sys; sys.stdout.write(json.dumps(json.loads(sys.argv[1]), sort_keys=True, separators=(',', " +
                                        "':'), ensure_ascii=False))",
                                        documented)
            #expect(ours == python)
            let mine = try jsonObject(Data(ours.utf8))
            let theirs = try jsonObject(Data(python.utf8))
            #expect(Set(mine.keys) == Set(theirs.keys))
            for key in theirs.keys { #expect((mine[key] as? NSObject) == (theirs[key] as? NSObject), "\(key)") }
        }
    }

    /// What ENSKit sent before its models (the same members in a dictionary, through
    /// JSONSerialization with sorted keys and unescaped slashes) is byte for byte what
    /// it sends now, non-ASCII, quotes, slashes and control characters included.
    @Test func theBytesAreThoseJSONSerializationWrote() throws {
        let apns = try ENSPushToken(apnsHex: Self.hex)
        let password = "pä/ss \"w\"\\ \t\u{1}\n😀"
        var creds = RegistrationCreds(credentials: try ENSCredentials.password(userName: "Zoë@example.com", password: password).members(),
                                      token: TokenMember(apns))
        creds.deviceSecret = "q+/=="
        creds.ewsUrl = "https://mail.example.com/EWS/Exchange.asmx"
        let old: [String: Any] = ["apnsToken": Self.hex, "userName": "Zoë@example.com", "password": password, "deviceSecret": "q+/==",
                                  "ewsUrl": "https://mail.example.com/EWS/Exchange.asmx",
                                  "purpose": "registerdevicev2.creds", "sealedAt": Self.sealedAt]
        let before = try JSONSerialization.data(withJSONObject: old, options: [.sortedKeys, .withoutEscapingSlashes])
        #expect(String(decoding: before, as: UTF8.self) == (try bound(creds, "registerdevicev2.creds")))
        let request: [String: Any] = ["userid": Self.userID, "email": "someone@example.com",
                                      "bundleid": "com.example.mail", "force": 0, "exchVersion": 3,
                                      "creds": "c2Vh+bGVk/w=="]
        let body = RegistrationRequest(userid: Self.userID, email: "someone@example.com", bundleid: "com.example.mail", force: 0, exchVersion: 3,
                                       defaultSound: nil, ewsDeviceId: nil, privacyCertificate: nil, creds: "c2Vh+bGVk/w==")
        #expect(try JSONSerialization.data(withJSONObject: request, options: [.sortedKeys, .withoutEscapingSlashes]) == (try WireJSON.encode(body)))
    }

    // MARK: Answers

    func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
        try WireJSON.decode(T.self, from: Data(text.utf8))
    }

    func failure<T: Decodable>(_ type: T.Type, _ text: String) -> String? {
        do {
            _ = try WireJSON.decode(T.self, from: Data(text.utf8))
            return nil
        } catch {
            return error.description
        }
    }

    /// docs/api.md's answers, each with a member this version does not know.
    @Test func answersDecodeFromTheDocumentedExamples() throws {
        let pem = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq...\n-----END PUBLIC KEY-----\n"
        let key = try decode(PublicKeyAnswer.self, #"{"pubKey":"-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq...\n-----END PUBLIC KEY-----\n","# +
                                                   #""userid":"\#(Self.userID)","responseCode":"UserRecordPresentNotSubscribed","later":[1]}"#)
        #expect(key.pubKey == pem && key.userid == Self.userID)
        let envelope = try decode(AnswerEnvelope.self, #"{"message":"Exchange refused the credentials.","responseCode":"ExchangeAuthFailed"}"#)
        #expect(envelope.responseCode == "ExchangeAuthFailed" && envelope.message == "Exchange refused the credentials." && envelope.refusal == nil)
        #expect(try decode(AnswerEnvelope.self, #"{"responseCode":"Alive"}"#).responseCode == "Alive")
        // Words are for people: a message of another type is read as absent.
        #expect(try decode(AnswerEnvelope.self, #"{"responseCode":"InvalidRequest","message":7,"refusal":"keySize"}"#).message == nil)

        let registered = try decode(RegistrationAnswer.self,
                                    #"{"privacy":"encrypted","pushTag":"Ab3dEf6hIj9kLm0n","responseCode":"UserSubscribed","new":{}}"#)
        #expect(registered.privacy == .encrypted && registered.pushTag == "Ab3dEf6hIj9kLm0n")
        let plain = try decode(RegistrationAnswer.self, #"{"responseCode":"UserSubscribed"}"#)
        #expect(plain.privacy == nil && plain.pushTag == nil)
        #expect(try decode(CheckInAnswer.self, #"{"credentials":"Stored","responseCode":"UserSubscribed"}"#).credentials == .stored)
        #expect(try decode(CheckInAnswer.self, #"{"responseCode":"UserSubscribed"}"#).credentials == nil)
        #expect(try decode(PrivacyAnswer.self, #"{"privacy":"blind","responseCode":"UpdateSuccess"}"#).privacy == .blind)

        let found = try decode(NotificationAnswer<NotificationContentBody>.self,
                               #"{"id":"0123456789abcdef0123456789abcdef","content":{"sender":"Ann Example","subject":"Lunch?","badge":3},"# +
                               #""responseCode":"NotificationFound"}"#)
        #expect(found.id == "0123456789abcdef0123456789abcdef" && found.content.content == ENSNotificationContent(sender: "Ann Example",
            subject: "Lunch?", badge: 3))
        let withKey = try decode(NotificationContentBody.self,
                                 #"{"sender":"a","subject":"b","backgroundSyncKey":"k","syncKeyExpirationTime":"12/22/2026 00:00:00.000","# +
                                 #""extra":true}"#)
        #expect(withKey.content.syncKey == ENSSyncKey(key: "k", expirationText: "12/22/2026 00:00:00.000") && withKey.content.badge == nil)
        let blind = try decode(NotificationAnswer<BlindContentBody>.self,
                               #"{"id":"0123456789abcdef0123456789abcdef","content":{"data":"ZA==","dataKey":"aw==","dataSignature":"cw==","# +
                               #""encryptionCertificateId":"0f0f","encryptionCertificateThumbprint":"abcd"},"responseCode":"NotificationFound"}"#)
        #expect(blind.content.content == BlindContent(data: "ZA==", dataKey: "aw==", dataSignature: "cw==", encryptionCertificateID: "0f0f",
                                                      encryptionCertificateThumbprint: "abcd"))
        let history = try decode(HistoryAnswer.self,
                                 #"{"notifications":[{"id":"0123456789abcdef0123456789abcdef","ts":1764081234567,"sender":"Ann Example","# +
                                 #""subject":"Lunch?","read":0}],"# +
                                 #""responseCode":"NotificationHistory"}"#)
        #expect(history.notifications.map(\.entry) == [ENSHistoryEntry(id: "0123456789abcdef0123456789abcdef", timestamp: 1_764_081_234_567,
                                                                         sender: "Ann Example", subject: "Lunch?", isRead: false)])
        #expect(try decode(HistoryAnswer.self, #"{"notifications":[],"responseCode":"NotificationHistory"}"#).notifications.isEmpty)
        #expect(try decode(MarkReadAnswer.self, #"{"marked":1,"responseCode":"UpdateSuccess"}"#).marked == 1)
        // An integer as FCM writes it (a string), or integral in another form, is read.
        #expect(try decode(MarkReadAnswer.self, #"{"marked":"2"}"#).marked == 2)
        #expect(try decode(MarkReadAnswer.self, #"{"marked":3.0}"#).marked == 3)
    }

    @Test func malformedAnswersNameTheMember() {
        #expect(failure(PublicKeyAnswer.self, #"{"userid":"u","responseCode":"UserRecordPresentNotSubscribed"}"#) == "'pubKey' is missing")
        #expect(failure(PublicKeyAnswer.self, #"{"pubKey":42,"userid":"u"}"#) == "'pubKey' has the wrong type")
        #expect(failure(PublicKeyAnswer.self, #"{"pubKey":null,"userid":"u"}"#) == "'pubKey' is null")
        #expect(failure(PublicKeyAnswer.self, #"["pubKey"]"#) == "not a JSON object")
        #expect(failure(PublicKeyAnswer.self, "<html>") == "not JSON")
        #expect(failure(AnswerEnvelope.self, #"{"responseCode":200}"#) == "'responseCode' has the wrong type")
        #expect(failure(RegistrationAnswer.self, #"{"pushTag":"Ab3dEf6hIj9k/m0n"}"#) == "'pushTag' is malformed")
        #expect(failure(RegistrationAnswer.self, #"{"privacy":1}"#) == "'privacy' has the wrong type")
        #expect(failure(CheckInAnswer.self, #"{"credentials":"Kept"}"#) == "'credentials' is malformed")
        #expect(failure(PrivacyAnswer.self, #"{"responseCode":"UpdateSuccess"}"#) == "'privacy' is missing")
        #expect(failure(NotificationAnswer<NotificationContentBody>.self, #"{"id":"x","content":{"subject":"s"}}"#) == "'content.sender' is missing")
        #expect(failure(NotificationAnswer<NotificationContentBody>.self, #"{"id":"x","content":{"sender":"a","subject":"s","badge":"many"}}"#)
                == "'content.badge' has the wrong type")
        #expect(failure(NotificationAnswer<NotificationContentBody>.self,
                        #"{"id":"x","content":{"sender":"a","subject":"s","backgroundSyncKey":"k"}}"#)
                == "'content.syncKeyExpirationTime' is missing")
        #expect(failure(NotificationAnswer<NotificationContentBody>.self, #"{"content":{"sender":"a","subject":"s"}}"#) == "'id' is missing")
        #expect(failure(HistoryAnswer.self,
                        #"{"notifications":[{"id":"i","ts":1,"sender":"a","subject":"s","read":2}]}"#) == "'notifications[0].read' is malformed")
        #expect(failure(HistoryAnswer.self, #"{"notifications":[{"id":"i","ts":1.5,"sender":"a","subject":"s","read":0}]}"#)
                == "'notifications[0].ts' has the wrong type")
        #expect(failure(HistoryAnswer.self, #"{"notifications":{}}"#) == "'notifications' has the wrong type")
        #expect(failure(MarkReadAnswer.self, #"{"marked":-1}"#) == "'marked' is malformed")
        #expect(failure(MarkReadAnswer.self, #"{"responseCode":"UpdateSuccess"}"#) == "'marked' is missing")
    }

    /// Through the client: a malformed answer to each endpoint is an `unexpectedAnswer`
    /// naming the member, with the status and responseCode ENS sent; nothing is kept.
    @Test func theClientRefusesMalformedAnswers() async throws {
        let (pem, _) = try Vectors.serverKey()
        let user = ENSUser(email: "Someone@Example.com")
        let apns = try ENSPushToken(apnsHex: Self.hex)
        let id = "0123456789abcdef0123456789abcdef"
        let transport = RecordedTransport(json:
            #"{"userid":"\#(user.userID)","responseCode":"UserRecordPresentNotSubscribed"}"#,
            #"{"pubKey":"\#(pem.replacingOccurrences(of: "\n", with: "\\n"))","userid":"someone else","responseCode":"UserAlreadySubscribed"}"#,
            #"{"responseCode":"UserSubscribed","privacy":"encrypted","pushTag":7}"#,
            #"{"responseCode":"UserSubscribed","credentials":true}"#,
            #"{"responseCode":"UpdateSuccess"}"#,
            #"{"id":"\#(id)","responseCode":"NotificationFound"}"#,
            #"{"notifications":[{"id":"\#(id)","sender":"a","subject":"s","read":0}],"responseCode":"NotificationHistory"}"#,
            #"{"marked":"one","responseCode":"UpdateSuccess"}"#)
        let store = MemoryKeyStore()
        let client = try makeClient(transport, keyStore: store)
        func malformed(_ code: String, _ what: String) -> ENSError { .malformedAnswer(status: 200, responseCode: code, what) }
        await #expect(throws: malformed("UserRecordPresentNotSubscribed", "'pubKey' is missing")) { try await client.getPublicKey(for: user) }
        await #expect(throws: malformed("UserAlreadySubscribed", "'userid' is not the user's")) { try await client.getPublicKey(for: user) }
        #expect(try store.data(for: .serverKey(client.namespace, user.userID)) == nil)
        try client.store(Data(pem.utf8), .serverKey(client.namespace, user.userID))
        await #expect(throws: malformed("UserSubscribed", "'pushTag' has the wrong type")) {
            try await client.register(ENSRegistration(user: user, token: apns, credentials: .password(userName: "u", password: "p")))
        }
        #expect(try client.registeredToken(for: user) == nil)
        await #expect(throws: malformed("UserSubscribed", "'credentials' has the wrong type")) {
            try await client.checkIn(user: user, token: apns, credentials: .password(userName: "u", password: "p"))
        }
        await #expect(throws: malformed("UpdateSuccess", "'privacy' is missing")) { try await client.updatePrivacy(user: user,
            token: apns, mode: .secure) }
        await #expect(throws: malformed("NotificationFound", "'content' is missing")) { try await client.getNotification(user: user,
            token: apns, id: id) }
        await #expect(throws: malformed("NotificationHistory", "'notifications[0].ts' is missing")) {
            try await client.getNotificationHistory(user: user, token: apns)
        }
        await #expect(throws: malformed("UpdateSuccess", "'marked' has the wrong type")) {
            try await client.markNotificationsRead(user: user, token: apns, ids: [id])
        }
        #expect(transport.requests.count == 8)
    }

    // MARK: What the device keeps and receives

    /// The blind key item keeps its form (`current`, `previous` with `retiredAt` in
    /// milliseconds); a malformed one is a key store error, never a crash.
    @Test func theBlindKeyItemKeepsItsForm() throws {
        let key = try ENSBlindKey(bits: 2048)
        var ring = ENSBlindKeyRing(current: key)
        #expect(try jsonObject(try ring.data()).keys.sorted() == ["current", "previous"])
        ring.retire(try ENSBlindKey(bits: 2048), now: Date(timeIntervalSince1970: 1_764_081_234.567))
        let object = try jsonObject(try ring.data())
        let previous = try #require(object["previous"] as? [[String: Any]])
        #expect(previous.count == 1 && previous[0]["retiredAt"] as? Int == 1_764_081_234_567 && Set(previous[0].keys) == ["key",
            "certificate", "retiredAt"])
        let read = try ENSBlindKeyRing(data: try ring.data())
        #expect(read.current == key && read.previous.map(\.key) == ring.previous.map(\.key))
        #expect(read.previous.first?.retiredAt == Date(timeIntervalSince1970: 1_764_081_234.567))
        for malformed in [#"{"current":{"key":"AA=="}}"#, #"{"previous":[{"key":"AA==","certificate":"AA=="}]}"#, #"{"previous":{}}"#] {
            #expect(throws: ENSError.self) { try ENSBlindKeyRing(data: Data(malformed.utf8)) }
        }
    }

    /// A push's values as the OS gives them (NSNumber, Int, strings, nested
    /// dictionaries) read as JSON would; `ens.blind` as an object or as FCM's JSON text.
    @Test func pushValuesAreReadAsTheirJSON() throws {
        let blind: [String: Any] = ["data": "ZA==", "dataKey": "aw==", "dataSignature": "cw==", "encryptionCertificateId": "0f0f",
                                    "encryptionCertificateThumbprint": "abcd", "unknown": NSNumber(value: 1.5)]
        let expected = BlindContent(data: "ZA==", dataKey: "aw==", dataSignature: "cw==",
                                    encryptionCertificateID: "0f0f", encryptionCertificateThumbprint: "abcd")
        #expect(BlindContent.fromPush(PushValue(blind)) == .some(expected))
        let text = String(decoding: try JSONSerialization.data(withJSONObject: blind), as: UTF8.self)
        #expect(BlindContent.fromPush(.string(text)) == .some(expected))
        #expect(BlindContent.fromPush(nil) == .some(nil))
        #expect(BlindContent.fromPush(.string("{}")) == nil)
        #expect(PushValue(NSNumber(value: 1_764_081_234_567)).int64 == 1_764_081_234_567 && PushValue(7).int64 == 7 && PushValue("12").int64 == 12)
        #expect(PushValue(NSNumber(value: 1.5)).int64 == nil && PushValue(Date()) == .unsupported)
        let push = try ENSPush(userInfo: ["aps": ["alert": ["title": "Ann", "body": "Lunch?"], "badge": NSNumber(value: 3)],
                                          "ens": ["id": "0123456789abcdef0123456789abcdef",
                                                  "ts": NSNumber(value: 1_764_081_234_567), "userid": Self.userID]])
        #expect(push.badge == 3 && push.timestamp == 1_764_081_234_567 && push.previewContent == ENSNotificationContent(sender: "Ann",
            subject: "Lunch?", badge: 3))
    }
}

extension Python {
    static let available: Bool = (try? run("import json")) != nil
}
