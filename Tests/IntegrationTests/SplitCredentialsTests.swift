import Codecs
import Curl
@testable import ENSVault
import Foundation
import MariaDB
import OpenSSL
import Testing

/// Credentials of any size, kept in split form (docs/exchange.md): the callback URL
/// carries a key of its subscription, the database the credentials sealed under it and
/// the master key. Through nginx, the Exchange simulator and the APNs simulator.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct SplitCredentialsTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("split-credentials-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
    }

    func register(_ user: TestUser, creds: [String: Any], force: Bool = false) throws -> String? {
        let response = try api.call("/registerdevicev2", [
            "userid": user.userID, "email": user.email, "creds": try user.sealJSON(creds), "bundleid": "com.example.mail",
            "exchVersion": "3", "force": force ? "1" : "0",
        ])
        return response.json["responseCode"]
    }

    func recordState(_ user: TestUser) throws -> (id: Int64, generation: Int64, keyMaterial: [UInt8]) {
        let row = try #require(try database.queryOne("""
            SELECT id, generation, private_key_sealed
            FROM EnsSubscriptionInfo
            WHERE userid = \(user.userID)
            """))
        let (id, generation, keyMaterial) = try row.decode(Int64.self, Int64.self, [UInt8].self)
        return (id, generation, keyMaterial)
    }

    func storedCredentials(_ recordID: Int64) throws -> Int64 {
        try database.queryOne("SELECT COUNT(*) FROM MailCredentials WHERE record_id = \(recordID)")?.int(0) ?? -1
    }

    func delivered(_ token: String, subject: String, within seconds: Double = 20) -> Bool {
        TestStack.eventually(within: seconds) {
            APNsSimulator.accepted().contains { push in
                push.token == token && ((push.payload["aps"] as? [String: Any])?["alert"] as? [String: String])?["body"] == subject
            }
        }
    }

    /// The subscription's URL as Exchange holds it.
    func callbackURL(_ email: String) throws -> String {
        try #require(try ExchangeSimulator.subscriptions(of: email).last { $0["alive"] as? Bool == true }?["url"] as? String)
    }

    /// RSA-2048 with an issuing CA the bundle carries (sent as the chain), RSA-4096 and
    /// EC P-256: each registers, gets a short URL, and its notifications carry sender and
    /// subject (GetItem authenticated by the certificate).
    @Test(arguments: ["rsa2048-chain", "rsa4096", "ec"])
    func clientCertificatesOfOrdinarySizesRegisterAndNotify(kind: String) throws {
        let email = "c\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let (pkcs12, password) = try ExchangeSimulator.certificateMailbox(email, kind: kind)
        let user = try api.newUser(email: email)
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: ["apnsToken": token, "CBAData": ["certificate": pkcs12, "password": password]]) == "UserSubscribed")
        let url = try callbackURL(email)
        #expect(url.utf8.count < 200 && url.contains("/ews/k2."), "\(url.utf8.count) characters, while the bundle is \(pkcs12.utf8.count)")
        try rememberStoredForms(url: url, pkcs12: pkcs12, password: password)
        let record = try recordState(user)
        #expect(try storedCredentials(record.id) == 1)
        let subject = "Certificate \(kind) \(UUID().uuidString.prefix(6))"
        #expect(try ExchangeSimulator.newMail(email, subject: subject, fromName: "Carol").first?["subscriptionStatus"] as? String == "OK")
        #expect(delivered(token, subject: subject))
        let lookups = try ExchangeSimulator.requests().filter { ($0["operation"] as? String) == "GetItem"
            && ($0["host"] as? String)?.contains("pox.test") == true }
        #expect(lookups.last?["auth"] as? String == "certificate")
    }

    /// What the secret scan must find in no dump and no log: the URL's key (the part of
    /// the split never stored), sealed as it travels and as hex, and the certificate's
    /// private key as DER hex (extracted by the openssl CLI).
    func rememberStoredForms(url: String, pkcs12: String, password: String) throws {
        let suffix = try #require(url.components(separatedBy: "/ews/").last)
        TestSecrets.remember(String(suffix.dropFirst("k2.".count)))
        let token = try #require(CallbackToken(path: suffix, vault: Vault(masterKey: try TestStack.masterKey())))
        guard case .keyed(let urlKey) = token.form else {
            Issue.record("a new subscription's URL is not keyed")
            return
        }
        TestSecrets.remember(Hex.encode(urlKey))
        let keyHex = try TestStack.run("/bin/sh", ["-c", """
            printf %s "$1" | base64 -d | openssl pkcs12 -nocerts -nodes -passin "pass:$2" 2>/dev/null | openssl pkey -outform DER | od -An -tx1 -v | \
            tr -d ' \\n'
            """, "sh", pkcs12, password])
        #expect(keyHex.count > 200)
        TestSecrets.remember(keyHex)
    }

    /// An OAuth access token of 4,000 characters (it used to fail above about 1,400).
    @Test func aLargeOAuthTokenFits() throws {
        let email = "o\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let accessToken = "eyJ" + (0..<4000).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement().map(String.init) ?? "a" }.joined()
        TestSecrets.remember(accessToken)
        try ExchangeSimulator.mailbox(email, oauthToken: accessToken)
        let user = try api.newUser(email: email)
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: ["apnsToken": token, "oauthAccessToken": accessToken]) == "UserSubscribed")
        #expect(try callbackURL(email).utf8.count < 200)
        let subject = "Large token \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(email, subject: subject, fromName: "Dan")
        #expect(delivered(token, subject: subject))
    }

    /// A subscription made before credentials moved to the database has a URL that
    /// carries them and no stored row: it keeps delivering with sender and subject.
    /// Marked not subscribed (docs/exchange.md's migration), its device is woken and
    /// registers again; the new subscription is keyed, and the old URL hears
    /// Unsubscribe. Deleting the record erases what is stored.
    @Test func aSubscriptionWhoseURLCarriesTheCredentialsKeepsWorkingUntilRenewed() throws {
        let email = "m\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let password = "Pa55-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(password)
        try ExchangeSimulator.mailbox(email, userName: email, password: password)
        let user = try api.newUser(email: email)
        let token = TestSecrets.apnsToken()
        let creds: [String: Any] = ["apnsToken": token, "userName": email, "password": password]
        #expect(try register(user, creds: creds) == "UserSubscribed")
        let record = try recordState(user)

        // What the subscription would look like had it been made by the previous
        // version: the credentials in its URL, nothing stored. The URL is made by
        // Python's `cryptography` from the documented construction, so this also checks
        // ENS's carrying form against an independent implementation.
        let master = try String(contentsOfFile: TestStack.directory + "/secrets/master.key",
                                encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let carrying = try TestStack.run("/usr/bin/python3", [TestStack.root + "/Tests/tools/callback_url.py", "carrying", master, String(record.id),
                                                              String(record.generation), Hex.encode(record.keyMaterial), email, password])
        let vault = Vault(masterKey: try TestStack.masterKey())
        let opened = try #require(CallbackToken(path: carrying, vault: vault)).openCarried(recordKeyMaterial: record.keyMaterial, vault: vault)
        // The documented encoding (docs/exchange.md): format 1, then method 1 (basic),
        // user name and password as tag-length-value fields.
        func field(_ tag: UInt8, _ value: [UInt8]) -> [UInt8] { [tag, UInt8(value.count >> 8), UInt8(value.count & 0xFF)] + value }
        #expect(opened == [1] + field(1, [1]) + field(2, Array(email.utf8)) + field(3, Array(password.utf8)))
        try database.execute("DELETE FROM MailCredentials WHERE record_id = \(record.id)")

        let subject = "Old URL \(UUID().uuidString.prefix(6))"
        let prepared = try ExchangeSimulator.control("/newmail", ["email": email, "subject": subject, "fromName": "Erin",
                                                                  "fromAddress": "erin@elsewhere.test", "deliver": false])
        let body = try #require((prepared["notifications"] as? [[String: Any]])?.first?["body"] as? String)
        let answer = try TestStack.post("/ews/" + carrying, body: Array(body.utf8), contentType: "text/xml; charset=utf-8")
        #expect(answer.status == 200 && answer.bodyText.contains("OK"), "\(answer.status) \(answer.bodyText)")
        #expect(delivered(token, subject: subject))

        // docs/exchange.md's way to move every such subscription at once: mark them not
        // subscribed; `ens-cron renew` wakes their devices, which register again.
        let marked = try database.execute("""
            UPDATE EnsSubscriptionInfo s SET s.registered = 0
            WHERE s.mail_backend = 'ews' AND s.registered = 1 AND s.id = \(record.id)
              AND NOT EXISTS (SELECT 1 FROM MailCredentials c WHERE c.record_id = s.id AND c.generation = s.generation)
            """)
        #expect(marked.affectedRows == 1)
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["renew", "--config", TestStack.configPath])
        #expect(try database.queryOne("""
            SELECT COUNT(*)
            FROM Devices
            WHERE subscription_row = \(record.id) AND last_wakeup_at IS NOT NULL
            """)?.int(0) == 1)
        #expect(try register(user, creds: creds, force: true) == "UserSubscribed")
        #expect(try callbackURL(email).contains("/ews/k2."))
        let after = try TestStack.post("/ews/" + carrying, body: Array(body.utf8), contentType: "text/xml; charset=utf-8")
        #expect(after.status == 200 && after.bodyText.contains("Unsubscribe"), "\(after.status) \(after.bodyText)")
        let renewed = try recordState(user)
        #expect(try database.queryOne("""
            SELECT generation
            FROM MailCredentials
            WHERE record_id = \(record.id)
            """)?.decode(Int64.self) == renewed.generation)

        let unregistered = try api.call("/unregister", ["userid": user.userID, "token": try user.seal(token)])
        #expect(unregistered.json["responseCode"] == "DeviceUnregistered")
        #expect(try storedCredentials(record.id) == 0)
    }

    func freshRows(_ recordID: Int64) throws -> Int64 {
        try database.queryOne("SELECT COUNT(*) FROM MailCredentialsFresh WHERE record_id = \(recordID)")?.int(0) ?? -1
    }

    /// The user changed their password. Until the device tells ENS, notifications go
    /// out generic (GetItem is refused); a check-in carrying the new password leaves it
    /// sealed to the subscription, and the next callback takes it: sender and subject
    /// again, the fresh row gone. A check-in that names no registered device (someone
    /// holding the app's ApiToken and the user's id, not the device's push token) can
    /// plant nothing.
    @Test func freshCredentialsFromACheckInAreTakenByTheNextCallback() throws {
        let email = "f\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let (old, new) = ("Old-\(UUID().uuidString.prefix(8))", "New-\(UUID().uuidString.prefix(8))")
        TestSecrets.remember(old)
        TestSecrets.remember(new)
        try ExchangeSimulator.mailbox(email, userName: email, password: old)
        let user = try api.newUser(email: email)
        let token = TestSecrets.apnsToken()
        #expect(try register(user, creds: ["apnsToken": token, "userName": email, "password": old,
                                           "deviceSecret": TestSecrets.deviceSecret(for: token)]) == "UserSubscribed")
        let record = try recordState(user)
        let sealedBefore = try database.queryOne("SELECT sealed FROM MailCredentials WHERE record_id = \(record.id)")?.decode([UInt8].self)

        try ExchangeSimulator.mailbox(email, userName: email, password: new)
        let stale = "Before the check-in \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(email, subject: stale, fromName: "Fay")
        #expect(TestStack.eventually(within: 20) { APNsSimulator.accepted().contains { $0.token == token } })
        #expect(!delivered(token, subject: stale, within: 1), "GetItem with the old password cannot have found the subject")

        let checkIn = { (pushToken: String) throws -> [String: String] in
            try api.call("/getsubscriptionstatusv2", [
                "userid": user.userID,
                "subscriptionPayload": try user.sealJSON(["pushToken": pushToken, "ignoreLastMessageDate": 1]),
                "creds": try user.sealForDevice(["userName": email, "password": new], token: pushToken, for: "getsubscriptionstatusv2.creds"),
                "email": email,
            ]).json
        }
        let stranger = try checkIn(TestSecrets.apnsToken())
        #expect(stranger["responseCode"] == "UserSubscriptionNotFound" && stranger["credentials"] == nil)
        #expect(try freshRows(record.id) == 0)
        let answer = try checkIn(token)
        #expect(answer["responseCode"] == "UserSubscribed" && answer["credentials"] == "Stored", "\(answer)")
        #expect(try freshRows(record.id) == 1)

        let fresh = "After the check-in \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(email, subject: fresh, fromName: "Fay")
        #expect(delivered(token, subject: fresh))
        #expect(try freshRows(record.id) == 0)
        let sealedAfter = try database.queryOne("SELECT sealed FROM MailCredentials WHERE record_id = \(record.id)")?.decode([UInt8].self)
        #expect(sealedAfter != nil && sealedAfter != sealedBefore)
    }
}
