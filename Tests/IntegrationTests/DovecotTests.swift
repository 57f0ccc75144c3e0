import Codecs
import Curl
import ENSTestSupport
import Foundation
import Testing

/// The Dovecot backend end to end, on a real Dovecot (scripts/dovecot.sh) registered
/// with `ens-cron dovecot add` and running the configuration that command printed: a
/// device registers with its IMAP password, ENS writes its opt-in into the account's
/// METADATA, mail delivered over LMTP reaches the phone through Dovecot's push plugin.
@Suite(.serialized, .enabled(if: TestStack.isRunning)) struct DovecotTests {
    /// A private Dovecot registered as `name` for `domain`, with what `ens-cron dovecot
    /// add` printed installed (its push plugin trusting the stack's certificate).
    static func registeredDovecot(_ name: String, domain: String, driver: String = "ox") throws -> DovecotInstance {
        let dovecot = try DovecotInstance()
        let snippet = try cron(["dovecot", "add", name, "--imap-url", dovecot.imapsURL, "--domains", domain,
                                "--ca-file", dovecot.certificatePath, "--driver", driver])
        try #require(snippet.contains("push_notification_driver"), "\(snippet)")
        // The Lua driver's HTTP client cannot resolve host names from a delivery
        // (docs/dovecot.md): its URL names ENS by address.
        let installed = snippet.replacingOccurrences(of: "/usr/share/ens/dovecot/", with: TestStack.root + "/dovecot/")
            .replacingOccurrences(of: "ens_push_url = https://localhost:", with: "ens_push_url = https://127.0.0.1:")
        try dovecot.restart(adding: installed, trusting: TestStack.certificate)
        return dovecot
    }

    @discardableResult
    static func cron(_ arguments: [String]) throws -> String {
        try TestStack.run(TestStack.root + "/.build/debug/ens-cron", arguments + ["--config", TestStack.configPath])
    }

    /// An account on `dovecot` and its ENS user, registered with one device.
    struct Account {
        let email: String
        let password: String
        let user: TestUser
        let token: String

        static func make(on dovecot: DovecotInstance, domain: String, api: DeviceClient) throws -> Account {
            let email = "u\(UUID().uuidString.prefix(8).lowercased())@\(domain)"
            let password = "Dove-\(UUID().uuidString.prefix(8))"
            TestSecrets.remember(password)
            try dovecot.addUser(email, password: password)
            return Account(email: email, password: password, user: try api.newUser(email: email), token: TestSecrets.apnsToken())
        }

        /// `fcm`: the token is an FCM registration token. `extra`: more creds members
        /// (a privacy mode, say).
        func register(with api: DeviceClient, password: String? = nil, imapURL: String? = nil, token: String? = nil, fcm: Bool = false,
                      extra: [String: Any] = [:]) throws -> HTTPResponse {
            let pushToken = token ?? self.token
            var creds: [String: Any] = [fcm ? "fcmToken" : "apnsToken": pushToken, "userName": email, "password": password ?? self.password,
                                        "deviceSecret": TestSecrets.deviceSecret(for: fcm ? "fcm:" + pushToken : pushToken)]
            if let imapURL { creds["imapUrl"] = imapURL }
            creds.merge(extra) { _, new in new }
            return try api.call("/registerdevicev2", [
                "userid": user.userID, "email": email, "creds": try user.sealJSON(creds,
                                                                                  for: "registerdevicev2.creds"), "bundleid": "com.example.mail",
            ])
        }
    }

    static func alert(_ push: APNsSimulator.Accepted) -> [String: String]? {
        (push.payload["aps"] as? [String: Any])?["alert"] as? [String: String]
    }

    static func pushes(to token: String) -> [APNsSimulator.Accepted] { APNsSimulator.accepted().filter { $0.token == token } }

    static func message(subject: String, from: String = "=?UTF-8?Q?J=C3=BCrgen_M=C3=BCller?= <juergen@example.net>") -> String {
        "From: \(from)\r\nTo: someone\r\nSubject: \(subject)\r\nMessage-ID: <\(UUID().uuidString)@example.net>\r\n\r\nHello.\r\n"
    }

    @Test func aDeliveryReachesThePhoneWithItsSubjectDecoded() throws {
        let dovecot = try Self.registeredDovecot("dove-a", domain: "dove-a.test")
        defer { dovecot.stop() }
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-a.test", api: api)
        let answer = try account.register(with: api)
        try #require(answer.json["responseCode"] == "UserSubscribed", "\(answer.status) \(answer.bodyText)")
        // The opt-in is in the account's server-level METADATA: a routing token, no more.
        let optIn = try dovecot.metadata("/private/vendor/vendor.dovecot/http-notify", of: account.email)
        #expect(optIn.hasPrefix("user=d1.") || optIn.hasPrefix("user=d2."), "\(optIn)")
        #expect(!optIn.contains(account.email) && !optIn.contains(account.password))

        try dovecot.deliver(Self.message(subject: "=?UTF-8?B?R3LDvMOfZSBhdXMgS8O2bG4g4oCUIHRlc3Qg8J+Tpw==?="), to: account.email)
        #expect(TestStack.eventually(within: 15) { !Self.pushes(to: account.token).isEmpty }, "\(dovecot.log)")
        let push = try #require(Self.pushes(to: account.token).first)
        #expect(Self.alert(push) == ["title": "Jürgen Müller", "body": "Grüße aus Köln — test 📧"])
        // A second message is a second push.
        try dovecot.deliver(Self.message(subject: "Second"), to: account.email)
        #expect(TestStack.eventually(within: 15) { Self.pushes(to: account.token).count == 2 })
        // (The password is one of TestSecrets: the run's secret scan looks for it in the
        // database, the logs and Dovecot's own directory.)
    }

    /// ENS's Lua script, the default driver: its own METADATA key, the account's login in
    /// the push, and the opt-in cleared by the script once ENS no longer serves it.
    @Test func theLuaScriptPushesAndClearsAnOptInNoOneServes() throws {
        let dovecot = try Self.registeredDovecot("dove-lua", domain: "dove-lua.test", driver: "lua")
        defer { dovecot.stop() }
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-lua.test", api: api)
        let answer = try account.register(with: api)
        try #require(answer.json["responseCode"] == "UserSubscribed", "\(answer.status) \(answer.bodyText)")
        let key = "/private/vendor/vendor.ens/push-token"
        let optIn = try dovecot.metadata(key, of: account.email)
        #expect(optIn.hasPrefix("d1.") || optIn.hasPrefix("d2."), "\(optIn)")
        // The ox driver's shared key is left alone (OX App Suite and EGroupware use it).
        #expect(try dovecot.metadata("/private/vendor/vendor.dovecot/http-notify", of: account.email) == "")

        try dovecot.deliver(Self.message(subject: "=?ISO-8859-1?Q?Caf=E9_au_lait?="), to: account.email)
        #expect(TestStack.eventually(within: 15) { !Self.pushes(to: account.token).isEmpty }, "\(dovecot.log)")
        #expect(Self.alert(try #require(Self.pushes(to: account.token).first)) == ["title": "Jürgen Müller", "body": "Café au lait"])

        // The device leaves; the next delivery hears 410 and the script clears the opt-in.
        let left = try api.call("/unregister", ["userid": account.user.userID,
                                                "token": try account.user.sealForDevice(["apnsToken": account.token],
                                                                                        token: account.token, for: "unregister.token")])
        #expect(left.json["responseCode"] == "DeviceUnregistered", "\(left.bodyText)")
        try dovecot.deliver(Self.message(subject: "After leaving"), to: account.email)
        #expect(TestStack.eventually(within: 10) { (try? dovecot.metadata(key, of: account.email)) == "" }, "\(dovecot.log)")
        #expect(Self.pushes(to: account.token).count == 1)
    }

    /// An Android phone hears the decoded subject through FCM; the private modes show
    /// nothing of the mail, as for Exchange (PrivateNotificationTests).
    @Test func androidAndThePrivateModesBehaveAsForExchange() throws {
        let dovecot = try Self.registeredDovecot("dove-g", domain: "dove-g.test")
        defer { dovecot.stop() }
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-g.test", api: api)
        try #require(try account.register(with: api).json["responseCode"] == "UserSubscribed")
        let android = TestSecrets.fcmToken()
        #expect(try account.register(with: api, token: android, fcm: true).json["responseCode"] == "UserUpdated")
        let generic = TestSecrets.apnsToken()
        #expect(try account.register(with: api, token: generic, extra: ["privacy": "generic"]).json["privacy"] == "generic")
        let secure = TestSecrets.apnsToken()
        #expect(try account.register(with: api, token: secure, extra: ["privacy": "secure"]).json["privacy"] == "secure")

        try dovecot.deliver(Self.message(subject: "=?UTF-8?Q?Gr=C3=BC=C3=9Fe_aus_K=C3=B6ln?="), to: account.email)
        #expect(TestStack.eventually(within: 15) {
            FCMSimulator.accepted().contains { $0.token == android } && !Self.pushes(to: generic).isEmpty && !Self.pushes(to: secure).isEmpty
        }, "\(dovecot.log)")
        let fcm = try #require(FCMSimulator.accepted().first { $0.token == android })
        #expect(fcm.notification["body"] == "Grüße aus Köln" && fcm.notification["title"] == "Jürgen Müller")
        #expect(Self.alert(try #require(Self.pushes(to: account.token).first))?["body"] == "Grüße aus Köln")
        for token in [generic, secure] {
            let push = try #require(Self.pushes(to: token).first)
            let text = String(decoding: try JSONSerialization.data(withJSONObject: push.payload), as: UTF8.self)
            #expect(!text.contains("Köln") && !text.contains("K\\u00f6ln") && !text.contains("Müller"), "\(text)")
            #expect(Self.alert(push)?["title"] == "New mail")
        }
    }

    /// ENS unreachable while mail arrives: Dovecot delivers and stores the mail all the
    /// same (the push is lost; docs/dovecot.md says so).
    @Test func mailIsDeliveredWhileENSIsUnreachable() throws {
        let dovecot = try DovecotInstance()
        defer { dovecot.stop() }
        try dovecot.addUser("away@dove-h.test", password: "away-pass")
        _ = try IMAPClient(configuration: IMAPServerConfiguration(url: dovecot.imapsURL, caBundlePath: dovecot.certificatePath))
            .run("SETMETADATA \"\" (/private/vendor/vendor.dovecot/http-notify \"user=d1.x\")", login: "away@dove-h.test", password: "away-pass")
        // A hook on a port nobody listens on, as ENS down looks from Dovecot.
        try dovecot.restart(adding: """
            protocol lmtp {
              mail_plugins = $mail_plugins notify push_notification
            }
            plugin {
              push_notification_driver = ox:url=https://a:b@127.0.0.1:1/dovecot/v1 user_from_metadata timeout_msecs=500 max_retries=0
            }
            """)
        try dovecot.deliver(Self.message(subject: "While away"), to: "away@dove-h.test")
        let stored = try IMAPClient(configuration: IMAPServerConfiguration(url: dovecot.imapsURL, caBundlePath: dovecot.certificatePath))
            .run("STATUS INBOX (MESSAGES)", replyName: "STATUS", login: "away@dove-h.test", password: "away-pass")
        #expect(stored == ["INBOX (MESSAGES 1)"], "\(stored)")
        #expect(dovecot.log.contains("push-notification-ox"), "\(dovecot.log)")
    }

    @Test func aWrongPasswordWritesNoOptIn() throws {
        let dovecot = try Self.registeredDovecot("dove-b", domain: "dove-b.test")
        defer { dovecot.stop() }
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-b.test", api: api)
        let answer = try account.register(with: api, password: "not-the-password")
        #expect(answer.json["responseCode"] == "ExchangeAuthFailed", "\(answer.status) \(answer.bodyText)")
        #expect(try dovecot.metadata("/private/vendor/vendor.dovecot/http-notify", of: account.email) == "")
        // An imapUrl that names no registered server gets no password at all.
        let elsewhere = try account.register(with: api, imapURL: "imaps://127.0.0.2:993/")
        #expect(elsewhere.json["responseCode"] == "ExchangeAuthFailed", "\(elsewhere.status) \(elsewhere.bodyText)")
        #expect(!dovecot.log.contains("127.0.0.2"))
    }

    @Test func forgedHooksPushNothing() throws {
        let dovecot = try Self.registeredDovecot("dove-c", domain: "dove-c.test")
        defer { dovecot.stop() }
        let other = try Self.registeredDovecot("dove-d", domain: "dove-d.test")
        defer { other.stop() }
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-c.test", api: api)
        try #require(try account.register(with: api).json["responseCode"] == "UserSubscribed")
        let optIn = try dovecot.metadata("/private/vendor/vendor.dovecot/http-notify", of: account.email)
        let token = String(optIn.dropFirst("user=".count))
        let credential = try #require(Self.credential(from: try Self.cron(["dovecot", "config", "dove-c"])))
        let otherCredential = try #require(Self.credential(from: try Self.cron(["dovecot", "config", "dove-d"])))
        func hook(_ body: String, authorization: String?) throws -> HTTPResponse {
            var headers = [("Content-Type", "application/json; charset=utf-8")]
            if let authorization { headers.append(("Authorization", authorization)) }
            return try TestStack.client().send(HTTPRequest(method: .put, url: TestStack.baseURL + "/dovecot/v1",
                                                           headers: headers, body: Array(body.utf8)))
        }
        func basic(_ user: String, _ secret: String) -> String { "Basic " + Base64.encode(Array("\(user):\(secret)".utf8)) }
        func event(_ token: String, uid: Int, subject: String = "forged") -> String {
            #"{"user":"\#(token)","event":"messageNew","folder":"INBOX","imap-uidvalidity":1,"imap-uid":\#(uid),"from":"x <x@example.net>","# +
            #""subject":"\#(subject)","unseen":1}"#
        }
        // No credential, a wrong one, another server's credential with this server's name.
        #expect(try hook(event(token, uid: 1), authorization: nil).status == 401)
        #expect(try hook(event(token, uid: 2), authorization: basic("dove-c", "guess")).status == 401)
        #expect(try hook(event(token, uid: 3), authorization: basic("dove-c", otherCredential)).status == 401)
        // Another server's credential with its own name: the token opens only for dove-c.
        #expect(try hook(event(token, uid: 4), authorization: basic("dove-d", otherCredential)).status == 410)
        // A token that is no token; not JSON; not new mail (answered, nothing pushed).
        #expect(try hook(event("d1.AAAA", uid: 5), authorization: basic("dove-c", credential)).status == 410)
        #expect(try hook("{not json", authorization: basic("dove-c", credential)).status == 400)
        #expect(try hook(#"{"user":"\#(token)","event":"FlagsSet","folder":"INBOX","imap-uidvalidity":1,"imap-uid":6}"#,
                         authorization: basic("dove-c", credential)).status == 204)
        Thread.sleep(forTimeInterval: 1)
        #expect(Self.pushes(to: account.token).isEmpty)
        // The real credential and token do push, once per message: the driver's retry
        // of the same message collapses.
        #expect(try hook(event(token, uid: 7, subject: "real"), authorization: basic("dove-c", credential)).status == 204)
        #expect(try hook(event(token, uid: 7, subject: "real"), authorization: basic("dove-c", credential)).status == 204)
        #expect(TestStack.eventually(within: 10) { !Self.pushes(to: account.token).isEmpty })
        Thread.sleep(forTimeInterval: 1)
        #expect(Self.pushes(to: account.token).count == 1)
        // Two deliveries told out of order (parallel LMTP sessions) each push.
        #expect(try hook(event(token, uid: 10, subject: "later"), authorization: basic("dove-c", credential)).status == 204)
        #expect(try hook(event(token, uid: 9, subject: "earlier"), authorization: basic("dove-c", credential)).status == 204)
        #expect(TestStack.eventually(within: 10) { Self.pushes(to: account.token).count == 3 })
        // A body over the limit is refused whole.
        let huge = event(token, uid: 8, subject: String(repeating: "x", count: 300 * 1024))
        #expect(try hook(huge, authorization: basic("dove-c", credential)).status == 413)
    }

    @Test func aHundredKilobyteSubjectArrivesCut() throws {
        let dovecot = try Self.registeredDovecot("dove-e", domain: "dove-e.test")
        defer { dovecot.stop() }
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-e.test", api: api)
        try #require(try account.register(with: api).json["responseCode"] == "UserSubscribed")
        // Folded every 70 characters, as a mailer writes a long header.
        let words = (0..<1500).map { "word\($0)" }
        let subject = stride(from: 0, to: words.count,
                             by: 10).map { words[$0..<min($0 + 10, words.count)].joined(separator: " ") }.joined(separator: "\r\n ")
        #expect(subject.utf8.count > 100_000 / 10)
        try dovecot.deliver(Self.message(subject: subject + String(repeating: " pad", count: 22_000)), to: account.email)
        #expect(TestStack.eventually(within: 15) { !Self.pushes(to: account.token).isEmpty }, "\(dovecot.log)")
        let push = try #require(Self.pushes(to: account.token).first)
        let body = try #require(Self.alert(push)?["body"])
        #expect(body.hasPrefix("word0 word1 word2") && body.hasSuffix("…") && body.utf8.count <= 256)
    }

    @Test func dovecotDownAtRegistrationIsAClearErrorAndStoresNothing() throws {
        let dovecot = try Self.registeredDovecot("dove-f", domain: "dove-f.test")
        let api = try DeviceClient(token: try TestStack.newToken())
        let account = try Account.make(on: dovecot, domain: "dove-f.test", api: api)
        dovecot.stop()
        let answer = try account.register(with: api)
        #expect(answer.json["responseCode"] == "ExchangeError", "\(answer.status) \(answer.bodyText)")
        let status = try api.call("/getsubscriptionstatus", ["userid": account.user.userID])
        #expect(status.json["responseCode"] != "UserAlreadySubscribed")
    }

    /// A domain no server lists is found by its own records, and only a registered server
    /// counts: SRV (RFC 6186) through the DNS simulator, then Thunderbird's autoconfig
    /// file from the domain's web server (the Exchange simulator), asked without the
    /// address or any credential. (The private Dovecot listens on 127.0.0.1, so the
    /// records name that as their host.)
    @Test func discoveryFindsARegisteredServerByTheDomainsOwnRecords() throws {
        let dovecot = try Self.registeredDovecot("dove-g", domain: "dove-g.test")
        defer { dovecot.stop() }
        try Self.zone([
            "_imaps._tcp.srv-hosted.test": [[10, 1, 993, "imap.elsewhere.test."], [0, 1, dovecot.port, "127.0.0.1."]],
            "_imaps._tcp.unlisted.test": [[0, 1, 993, "imap.unlisted.test."]],
        ])
        defer { try? Self.zone([:]) }
        try ExchangeSimulator.domain("hosted.test", mode: "autoconfig", target: "127.0.0.1:\(dovecot.port):SSL")
        defer { try? ExchangeSimulator.domain("hosted.test", mode: "none") }
        let api = try DeviceClient(token: try TestStack.newToken())
        let bySRV = try Account.make(on: dovecot, domain: "srv-hosted.test", api: api)
        let byAutoconfig = try Account.make(on: dovecot, domain: "hosted.test", api: api)
        let elsewhere = try Account.make(on: dovecot, domain: "unlisted.test", api: api)
        // Dovecot reads its passwd-file again at most once a second: accounts added in the
        // second of a login would be unknown to it until the next.
        Thread.sleep(forTimeInterval: 1.1)

        let srvAnswer = try bySRV.register(with: api)
        #expect(srvAnswer.json["responseCode"] == "UserSubscribed", "\(srvAnswer.status) \(srvAnswer.bodyText)")
        #expect(try dovecot.metadata("/private/vendor/vendor.dovecot/http-notify", of: bySRV.email).hasPrefix("user=d"))

        let autoconfigAnswer = try byAutoconfig.register(with: api)
        #expect(autoconfigAnswer.json["responseCode"] == "UserSubscribed", "\(autoconfigAnswer.status) \(autoconfigAnswer.bodyText)")
        let fetched = try ExchangeSimulator.requests().filter { ($0["operation"] as? String) == "Autoconfig"
            && ($0["host"] as? String)?.hasSuffix("hosted.test") == true }
        #expect(!fetched.isEmpty)
        for request in fetched {
            #expect((request["path"] as? String)?.contains("?") == false && request["auth"] as? String == "none", "\(request)")
        }
        try dovecot.deliver(Self.message(subject: "found by autoconfig"), to: byAutoconfig.email)
        #expect(TestStack.eventually(within: 15) { !Self.pushes(to: byAutoconfig.token).isEmpty }, "\(dovecot.log)")
        #expect(Self.pushes(to: byAutoconfig.token).first.flatMap(Self.alert)?["body"] == "found by autoconfig")

        // A domain whose records name a server ENS does not know is not Dovecot's: it goes
        // on to Exchange, whose Autodiscover finds nothing there; no password went anywhere.
        #expect(try elsewhere.register(with: api).json["responseCode"] == "AutodiscoverFailed")
    }

    /// Rewrites the DNS simulator's zone (scripts/stack.sh, dns_sim_start).
    static func zone(_ records: [String: Any]) throws {
        let data = try JSONSerialization.data(withJSONObject: records)
        try data.write(to: URL(fileURLWithPath: TestStack.directory + "/dns/zone.json"), options: .atomic)
    }

    /// The secret in the configuration ens-cron printed (the ox driver's URL user info).
    static func credential(from snippet: String) -> String? {
        guard let start = snippet.range(of: "url=https://") else { return nil }
        let userInfo = snippet[start.upperBound...].prefix { $0 != "@" }
        guard let colon = userInfo.firstIndex(of: ":") else { return nil }
        return String(userInfo[userInfo.index(after: colon)...])
    }
}
