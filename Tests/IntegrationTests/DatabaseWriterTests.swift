import Curl
import Foundation
import MariaDB
import OpenSSL
import Testing

/// Someone who can write the database but does not have the master key (a leaked
/// service password, an SQL injection elsewhere on the host): what a callback, a
/// registration or a sealing takes from a row is authenticated (`RowBinding`,
/// migration 014). An edited row is refused, logged, and changes nothing: the opened
/// credentials go to no other host, fresh credentials are sealed to no other key
/// (docs/security.md, "A writer to the database").
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct DatabaseWriterTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("database-writer-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.reset()
        try ExchangeSimulator.domain("evil.test", mode: "hostile")
    }

    func requests(to host: String) throws -> Int {
        try ExchangeSimulator.requests().filter { ($0["host"] as? String) == host }.count
    }

    @Test func anEditedEWSURLSendsTheOpenedCredentialsNowhere() throws {
        let victim = try RegisteredUser.register(with: api)
        let original = try #require(try database.queryOne("""
            SELECT backend_url, endpoint
            FROM EnsSubscriptionInfo
            WHERE userid = \(victim.user.userID)
            """))
        let (url, endpoint) = try original.decode(String.self, String.self)
        // The writer points the subscription (URL and endpoint alike) at their own EWS.
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET backend_url = 'https://mail.evil.test/EWS/Exchange.asmx', endpoint = 'https://mail.evil.test:443'
            WHERE userid = \(victim.user.userID)
            """)
        let before = try requests(to: "mail.evil.test")
        let subject = "Not for the writer's server"
        _ = try ExchangeSimulator.newMail(victim.user.email, subject: subject, fromName: "Ann Example")
        Thread.sleep(forTimeInterval: 2)
        #expect(try requests(to: "mail.evil.test") == before, "the callback sent the credentials to the edited URL")
        #expect(victim.pushes(to: victim.token, subject: subject).isEmpty)
        let log = try String(contentsOfFile: TestStack.directory + "/log/ens-fcgi.log", encoding: .utf8)
        #expect(log.contains("fails its integrity check"))
        // Nothing changed: with the row put back, Exchange's retry delivers the mail.
        try database.execute("UPDATE EnsSubscriptionInfo SET backend_url = \(url), endpoint = \(endpoint) WHERE userid = \(victim.user.userID)")
        #expect(TestStack.eventually(within: 30) { !victim.pushes(to: victim.token, subject: subject).isEmpty })
        #expect(try requests(to: "mail.evil.test") == before)
    }

    @Test func aSwappedBoxKeyGetsNoFreshCredentials() throws {
        let victim = try RegisteredUser.register(with: api)
        // The writer's own P-256 key in place of the subscription's box key.
        let writersKey = try P256KeyAgreementKey.generate()
        try database.execute("""
            UPDATE MailCredentials c JOIN EnsSubscriptionInfo s ON s.id = c.record_id AND s.generation = c.generation
            SET c.box_public_key = \(writersKey.publicKey.x963) WHERE s.userid = \(victim.user.userID)
            """)
        let newPassword = "Changed-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(newPassword)
        let payload = try victim.user.sealJSON(["pushToken": victim.token, "ignoreLastMessageDate": 1])
        // The owner's own new password, proven at Exchange: still not sealed to the writer's key.
        try ExchangeSimulator.mailbox(victim.user.email, userName: victim.user.email, password: newPassword)
        let creds = try victim.user.sealForDevice(["userName": victim.user.email, "password": newPassword], token: victim.token,
                                                  for: "getsubscriptionstatusv2.creds")
        let answer = try api.call("/getsubscriptionstatusv2", ["userid": victim.user.userID, "subscriptionPayload": payload, "creds": creds,
                                                               "email": victim.user.email])
        #expect(answer.json["credentials"] == "Unused", "\(answer.bodyText)")
        let fresh = try database.queryOne("""
            SELECT COUNT(*) FROM MailCredentialsFresh f JOIN EnsSubscriptionInfo s ON s.id = f.record_id WHERE s.userid = \(victim.user.userID)
            """)?.int(0)
        #expect(fresh == 0, "fresh credentials were sealed to the writer's key")
    }

    @Test func aBindingCopiedFromTheWritersOwnRecordDoesNotPass() throws {
        // The writer registers an address of their own at their own EWS through the API
        // (a valid row, MAC and all), then copies its URL, endpoint and MAC onto the
        // victim's row: the MAC binds record and generation, so it does not pass there.
        let victim = try RegisteredUser.register(with: api)
        let own = try api.newUser(email: "w\(UUID().uuidString.prefix(8).lowercased())@evil.test")
        let token = TestSecrets.apnsToken()
        let registered = try api.call("/registerdevicev2", [
            "userid": own.userID, "email": own.email, "bundleid": "com.example.mail",
            "creds": try own.sealJSON(["apnsToken": token, "userName": "w", "password": "w", "ewsUrl": "https://mail.evil.test/EWS/Exchange.asmx"]),
        ])
        try #require(registered.json["responseCode"] == "UserSubscribed", "\(registered.bodyText)")
        try database.execute("""
            UPDATE EnsSubscriptionInfo v JOIN EnsSubscriptionInfo w ON w.userid = \(own.userID)
            SET v.backend_url = w.backend_url, v.endpoint = w.endpoint, v.binding_mac = w.binding_mac
            WHERE v.userid = \(victim.user.userID)
            """)
        let before = try requests(to: "mail.evil.test")
        _ = try ExchangeSimulator.newMail(victim.user.email, subject: "Copied binding", fromName: "Ann Example")
        Thread.sleep(forTimeInterval: 2)
        #expect(try requests(to: "mail.evil.test") == before)
        #expect(victim.pushes(to: victim.token, subject: "Copied binding").isEmpty)
    }
}
