import Curl
import Foundation
import MariaDB
import Testing
@testable import MailBackends

/// /registerdevicev2 against the Exchange simulator and the callback path end to end:
/// registration -> subscription -> SendNotification -> GetItem -> ens-sender -> APNs
/// simulator. Also: every registration outcome, the sealed callback URL, Unsubscribe
/// for superseded and deleted records, hostile SOAP, slow Exchange, SEG policy.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct ExchangeTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("exchange-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.reset()
    }

    /// A fresh address in `domain` with a mailbox the simulator knows.
    func mailboxUser(_ domain: String, password: String = "Pa55-\(UUID().uuidString.prefix(6))", oauth: Bool = false,
                     versions: [String]? = nil, unread: Int = 0) throws -> (TestUser, String) {
        let email = "u\(UUID().uuidString.prefix(8).lowercased())@\(domain)"
        TestSecrets.remember(password)
        if oauth {
            try ExchangeSimulator.mailbox(email, oauthToken: password, versions: versions, unread: unread)
        } else {
            try ExchangeSimulator.mailbox(email, userName: email, password: password, versions: versions, unread: unread)
        }
        return (try api.newUser(email: email), password)
    }

    func register(_ user: TestUser, creds: [String: Any], headers: [(String, String)] = [], force: Bool = false,
                  exchVersion: String = "3", sound: String? = "chime.caf", ewsDeviceID: String? = nil) throws -> [String: String] {
        var parameters = ["userid": user.userID, "email": user.email, "creds": try user.sealJSON(creds), "bundleid": "com.example.mail",
                          "exchVersion": exchVersion, "force": force ? "1" : "0"]
        if let sound { parameters["defaultSound"] = sound }
        if let ewsDeviceID { parameters["ewsDeviceId"] = ewsDeviceID }
        let response = try api.call("/registerdevicev2", parameters, headers: headers)
        #expect(response.status == 200, "\(response.status) \(response.bodyText)")
        return response.json
    }

    func basicCreds(_ user: TestUser, _ password: String, token: String) -> [String: Any] {
        ["apnsToken": token, "userName": user.email, "password": password]
    }

    func record(_ user: TestUser) throws -> Row? {
        try database.queryOne("""
            SELECT registered, generation, subscription_id, backend_url, backend_version, last_callback_at
            FROM EnsSubscriptionInfo WHERE userid = \(user.userID)
            """)
    }

    func pushes(to token: String) -> [APNsSimulator.Accepted] {
        APNsSimulator.accepted().filter { $0.token == token }
    }

    func alert(_ push: APNsSimulator.Accepted) -> [String: String]? {
        (push.payload["aps"] as? [String: Any])?["alert"] as? [String: String]
    }

    // MARK: Registration end to end

    @Test func basicAuthRegistrationThenNewMailReachesTheDevice() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test", unread: 4)
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: basicCreds(user, password, token: token), headers: [("badge", "1")])["responseCode"] == "UserSubscribed")

        let row = try #require(try record(user))
        #expect(try row.int(0) == 1)
        #expect(try row.optionalText(2)?.isEmpty == false)
        #expect(try row.text(3) == "https://mail.pox.test/EWS/Exchange.asmx")
        #expect(try row.text(4) == "Exchange2010_SP2")
        #expect(try database.queryOne("""
            SELECT ews_url
            FROM EWSUrlCache
            WHERE domain = 'pox.test'
            """)?.text(0) == "https://mail.pox.test/EWS/Exchange.asmx")

        // The callback URL Exchange holds carries no credential in clear.
        let subscription = try #require(try ExchangeSimulator.subscriptions(of: user.email).first)
        let url = try #require(subscription["url"] as? String)
        #expect(url.hasPrefix("https://localhost:\(TestStack.port)/ews/"))
        for secret in [password, user.email, user.email.lowercased(), String(user.email.split(separator: "@")[0]), "pox.test"] {
            #expect(!url.contains(secret))
        }
        #expect(url.utf8.count < 2083)

        // New mail: the simulator calls back, ENS looks the message up and pushes it.
        let callbacks = try ExchangeSimulator.newMail(user.email, subject: "Quarterly numbers", fromName: "Ann Example")
        #expect(callbacks.first?["httpStatus"] as? Int == 200)
        #expect(callbacks.first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { !pushes(to: token).isEmpty })
        let push = try #require(pushes(to: token).first)
        #expect(alert(push) == ["title": "Ann Example", "body": "Quarterly numbers"])
        let aps = try #require(push.payload["aps"] as? [String: Any])
        #expect(aps["badge"] as? Int == 5)
        #expect(aps["sound"] as? String == "chime.caf")
        #expect(aps["content-available"] as? Int == 1)
        #expect((push.payload["ens"] as? [String: Any])?["userid"] as? String == user.userID)
        #expect(push.topic == "com.example.mail" && push.pushType == "alert" && push.priority == 10)

        // The same batch delivered again (Exchange retries when our answer got lost)
        // carries the same collapse id, so the device shows the message once.
        #expect(push.collapseID?.count == 32)
        // ens-sender records the delivery on the device (batched, within a second).
        #expect(try TestStack.eventually(within: 5) {
            try database.queryOne("""
                SELECT d.last_notified_at FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
                WHERE s.userid = \(user.userID)
                """)?.optionalText(0) != nil
        })

        // A heartbeat moves last_callback_at, in the responder's next batch (within a second).
        try database.execute("UPDATE EnsSubscriptionInfo SET last_callback_at = '2020-01-01 00:00:00' WHERE userid = \(user.userID)")
        #expect(try ExchangeSimulator.heartbeat(user.email).first?["subscriptionStatus"] as? String == "OK")
        #expect(try TestStack.eventually(within: 5) { try record(user)?.text(5).hasPrefix("2020") == false })

        // A second registration of the same device does not touch Exchange.
        let before = try ExchangeSimulator.subscriptions(of: user.email).count
        #expect(try register(user, creds: basicCreds(user, password, token: token),
                             headers: [("badge", "1")])["responseCode"] == "UserAlreadySubscribed")
        #expect(try ExchangeSimulator.subscriptions(of: user.email).count == before)
    }

    /// Boxer FastSync: an unexpired sync key rides along with every new-mail push.
    @Test func syncKeysRideAlongWhileUnexpired() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test")
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: basicCreds(user, password, token: token))["responseCode"] == "UserSubscribed")
        let syncKey = "kek-\(UUID().uuidString)"
        TestSecrets.remember(syncKey)
        let info = try user.sealJSON(["apnsToken": token, "backgroundSyncKey": syncKey, "syncKeyExpirationTime": "01/01/2099 00:00:00.000"])
        #expect(try api.call("/updatesynckey", ["userid": user.userID, "info": info]).json["responseCode"] == "UpdateSuccess")
        #expect(try ExchangeSimulator.newMail(user.email, subject: "With a key", fromName: "Gus").first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { !pushes(to: token).isEmpty })
        let push = try #require(pushes(to: token).first)
        #expect(push.payload["backgroundSyncKey"] as? String == syncKey)
        #expect(push.payload["syncKeyExpirationTime"] as? String == "01/01/2099 00:00:00.000")
    }

    @Test func oauthRegistrationThroughSOAPAutodiscover() throws {
        try ExchangeSimulator.domain("soap.test", mode: "soap")
        let (user, accessToken) = try mailboxUser("soap.test", oauth: true)
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: ["apnsToken": token, "oauthAccessToken": accessToken], sound: nil)["responseCode"] == "UserSubscribed")
        let callbacks = try ExchangeSimulator.newMail(user.email, subject: "Token auth works", fromName: "Bob")
        #expect(callbacks.first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { !pushes(to: token).isEmpty })
        let push = try #require(pushes(to: token).first)
        #expect(alert(push) == ["title": "Bob", "body": "Token auth works"])
        let aps = try #require(push.payload["aps"] as? [String: Any])
        #expect(aps["badge"] == nil && aps["sound"] == nil)  // no badge header, no default sound
        #expect(try ExchangeSimulator.requests().filter { ($0["operation"] as? String) == "GetItem" }.allSatisfy { $0["auth"] as? String != "none" })
    }

    @Test func certificateRegistrationThroughTheHTTPRedirect() throws {
        try ExchangeSimulator.domain("redirect.test", mode: "http-redirect")
        let email = "c\(UUID().uuidString.prefix(8).lowercased())@redirect.test"
        let (pkcs12, bundlePassword) = try ExchangeSimulator.certificateMailbox(email)
        let user = try api.newUser(email: email)
        let token = TestSecrets.apnsToken()
        let creds: [String: Any] = ["apnsToken": token, "CBAData": ["certificate": pkcs12, "password": bundlePassword]]
        #expect(try register(user, creds: creds)["responseCode"] == "UserSubscribed")
        #expect(try ExchangeSimulator.violations().isEmpty)  // no credentials over plain HTTP
        #expect(try ExchangeSimulator.newMail(email, subject: "Signed in with a certificate",
                                              fromName: "Carol").first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { pushes(to: token).contains { alert($0)?["body"] == "Signed in with a certificate" } })
        // A bundle whose password is wrong is a credential failure.
        let wrong: [String: Any] = ["apnsToken": token, "CBAData": ["certificate": pkcs12, "password": "not-it"]]
        #expect(try register(user, creds: wrong, force: true)["responseCode"] == "ExchangeAuthFailed")
    }

    @Test func failureOutcomes() throws {
        // Autodiscover finds nothing.
        let nowhere = try api.newUser(email: "n\(UUID().uuidString.prefix(8).lowercased())@nowhere.test")
        #expect(try register(nowhere,
            creds: ["apnsToken": TestSecrets.apnsToken(), "userName": "x", "password": "y-secret"])["responseCode"] == "AutodiscoverFailed")
        // A redirect loop ends, as AutodiscoverFailed.
        try ExchangeSimulator.domain("loop.test", mode: "redirect-loop")
        let (looping, loopPassword) = try mailboxUser("loop.test")
        #expect(try register(looping,
                             creds: basicCreds(looping, loopPassword, token: TestSecrets.apnsToken()))["responseCode"] == "AutodiscoverFailed")
        // Wrong password: Autodiscover and EWS answer 401.
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, _) = try mailboxUser("pox.test")
        TestSecrets.remember("wrong-password-1")
        #expect(try register(user,
                             creds: basicCreds(user, "wrong-password-1", token: TestSecrets.apnsToken()))["responseCode"] == "ExchangeAuthFailed")
        var withURL = basicCreds(user, "wrong-password-1", token: TestSecrets.apnsToken())
        withURL["ewsUrl"] = "https://mail.pox.test/EWS/Exchange.asmx"
        #expect(try register(user, creds: withURL)["responseCode"] == "ExchangeAuthFailed")
        // Exchange fails otherwise.
        let (other, password) = try mailboxUser("pox.test")
        try ExchangeSimulator.fail("Subscribe", status: 500, responseCode: "ErrorInternalServerError", count: 1)
        #expect(try register(other, creds: basicCreds(other, password, token: TestSecrets.apnsToken()))["responseCode"] == "ExchangeError")
        #expect(try record(other)?.int(0) == 0)
        // A redirectAddr to a mailbox in another domain is followed.
        try ExchangeSimulator.domain("addr.test", mode: "redirect-addr", target: other.email)
        let aliased = try api.newUser(email: "alias\(UUID().uuidString.prefix(6).lowercased())@addr.test")
        #expect(try register(aliased, creds: basicCreds(other, password, token: TestSecrets.apnsToken()))["responseCode"] == "UserSubscribed")
    }

    @Test func olderServersGetAnOlderSchemaVersion() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test", versions: ["Exchange2007_SP1", "Exchange2010"])
        #expect(try register(user, creds: basicCreds(user, password, token: TestSecrets.apnsToken()),
                             exchVersion: "6")["responseCode"] == "UserSubscribed")
        #expect(try record(user)?.text(4) == "Exchange2010")
    }

    // MARK: Callbacks

    @Test func supersededAndDeletedSubscriptionsAreUnsubscribed() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test")
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: basicCreds(user, password, token: token))["responseCode"] == "UserSubscribed")
        let generation = try #require(try record(user)?.int(1))
        #expect(try register(user, creds: basicCreds(user, password, token: token), force: true)["responseCode"] == "UserSubscribed")
        #expect(try record(user)?.int(1) == generation + 1)
        // Both subscriptions get a heartbeat: the old one is told to stop, the new one not.
        let answers = try ExchangeSimulator.heartbeat(user.email).compactMap { $0["subscriptionStatus"] as? String }.sorted()
        #expect(answers == ["OK", "Unsubscribe"])
        #expect(try ExchangeSimulator.subscriptions(of: user.email).filter { $0["alive"] as? Bool == true }.count == 1)

        // Unregistering the last device deletes the record; the next callback unsubscribes.
        let sealed = try user.seal(token)
        #expect(try api.call("/unregister", ["userid": user.userID, "token": sealed]).json["responseCode"] == "DeviceUnregistered")
        #expect(try ExchangeSimulator.heartbeat(user.email).compactMap { $0["subscriptionStatus"] as? String } == ["Unsubscribe"])
    }

    @Test func slowGetItemStillAnswersInTimeWithAGenericAlert() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test")
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: basicCreds(user, password, token: token))["responseCode"] == "UserSubscribed")
        try ExchangeSimulator.fail("GetItem", delayMs: 6000, count: 1)
        let started = Date()
        let callbacks = try ExchangeSimulator.newMail(user.email, subject: "Slow server", fromName: "Dan")
        #expect(callbacks.first?["subscriptionStatus"] as? String == "OK")
        #expect(Date().timeIntervalSince(started) < 5.5, "the callback waited for GetItem")
        #expect(TestStack.eventually(within: 20) { !pushes(to: token).isEmpty })
        #expect(alert(try #require(pushes(to: token).first)) == ["title": "New mail", "body": ""])
    }

    @Test func senderOutageMeansExchangeRetriesAndNothingIsLost() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test")
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: basicCreds(user, password, token: token))["responseCode"] == "UserSubscribed")
        try TestStack.stack("sender-stop")
        defer { _ = try? TestStack.stack("sender-start") }
        let first = try ExchangeSimulator.newMail(user.email, subject: "During the outage", fromName: "Eve")
        #expect(first.first?["httpStatus"] as? Int == 503)
        try TestStack.stack("sender-start")
        // The simulator retries like Exchange (30 s, scaled down for tests) and gets OK.
        #expect(TestStack.eventually(within: 60) { pushes(to: token).contains { alert($0)?["body"] == "During the outage" } })
    }

    @Test func hostileCallbacksAreRefusedWithoutWork() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test")
        #expect(try register(user, creds: basicCreds(user, password, token: TestSecrets.apnsToken()))["responseCode"] == "UserSubscribed")
        let url = try #require(try ExchangeSimulator.subscriptions(of: user.email).first?["url"] as? String)
        let path = String(url.dropFirst("https://localhost:\(TestStack.port)".count))
        let client = try TestStack.client(http2: false)
        func post(_ path: String, _ body: String, type: String = "text/xml; charset=utf-8") throws -> HTTPResponse {
            try TestStack.post(path, body: Array(body.utf8), contentType: type, client: client)
        }
        let valid = """
            <?xml version="1.0" encoding="utf-8"?><soap11:Envelope xmlns:soap11="http://schemas.xmlsoap.org/soap/envelope/"><soap11:Body>\
            <m:SendNotification xmlns:m="http://schemas.microsoft.com/exchange/services/2006/messages" \
            xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types">\
            <m:ResponseMessages><m:SendNotificationResponseMessage ResponseClass="Success"><m:ResponseCode>NoError</m:ResponseCode>\
            <m:Notification><t:SubscriptionId>SUB</t:SubscriptionId><t:PreviousWatermark>W0</t:PreviousWatermark><t:MoreEvents>false</t:MoreEvents>\
            <t:StatusEvent><t:Watermark>W1</t:Watermark></t:StatusEvent></m:Notification></m:SendNotificationResponseMessage></m:ResponseMessages>\
            </m:SendNotification></soap11:Body></soap11:Envelope>
            """
        let subscriptionID = try #require(try record(user)?.optionalText(2))
        let heartbeat = valid.replacingOccurrences(of: "SUB", with: subscriptionID)
        let ok = try post(path, heartbeat)
        #expect(ok.status == 200 && ok.bodyText.contains(">OK<"))

        // Forged, altered and truncated URLs: 403 before any work.
        var altered = Array(path)
        altered[altered.count - 5] = altered[altered.count - 5] == "A" ? "B" : "A"
        for forged in [String(altered), String(path.dropLast(3)), "/ews/1/1/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "/ews/x"] {
            #expect(try post(forged, heartbeat).status == 403, "\(forged)")
        }
        // Hostile documents on a valid URL: 400, nothing recorded, nothing crashes.
        let xxe = #"<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>"#
        var laughs = #"<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">"#
        for level in 1...9 { laughs += "<!ENTITY a\(level) \"" + String(repeating: "&a\(level == 1 ? "" : String(level - 1));", count: 10) + "\">" }
        laughs += "]><l>&a9;</l>"
        let wrongNamespace = heartbeat.replacingOccurrences(of: "http://schemas.microsoft.com/exchange/services/2006/messages",
                                                            with: "https://schemas.microsoft.com/exchange/services/2006/messages")
        for hostile in [xxe, laughs, wrongNamespace, String(heartbeat.prefix(300)), "", "<?a?>", String(repeating: "<a>", count: 5000)] {
            let response = try post(path, hostile)
            #expect(response.status == 400, "\(hostile.prefix(40)): \(response.status)")
        }
        #expect(try post(path, heartbeat, type: "application/json").status == 415)
        let huge = "<a>" + String(repeating: "x", count: 10_000_000) + "</a>"
        #expect(try post(path, huge).status == 413)
        #expect(try TestStack.get("/alive").status == 200)
    }

    @Test func segPolicyDecidesPerDevice() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let (user, password) = try mailboxUser("pox.test")
        let allowed = TestSecrets.apnsToken()
        let denied = TestSecrets.apnsToken()
        let unlisted = TestSecrets.apnsToken()
        try ExchangeSimulator.control("/policy", ["deny": ["DENIED-DEVICE"]])
        #expect(try register(user, creds: basicCreds(user, password, token: allowed),
                             ewsDeviceID: "ALLOWED-DEVICE")["responseCode"] == "UserSubscribed")
        #expect(try register(user, creds: basicCreds(user, password, token: denied), ewsDeviceID: "DENIED-DEVICE")["responseCode"] == "UserUpdated")
        #expect(try register(user, creds: basicCreds(user, password, token: unlisted), ewsDeviceID: nil)["responseCode"] == "UserUpdated")
        #expect(try ExchangeSimulator.newMail(user.email, subject: "Policy", fromName: "Fay").first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { !pushes(to: allowed).isEmpty && !pushes(to: unlisted).isEmpty })
        Thread.sleep(forTimeInterval: 1)
        #expect(pushes(to: denied).isEmpty)
        try ExchangeSimulator.control("/policy", ["deny": []])
    }
}
