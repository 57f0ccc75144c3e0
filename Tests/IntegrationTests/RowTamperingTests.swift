import Codecs
import Curl
@testable import ENSModel
@testable import ENSVault
import ENSStore
import Foundation
import MariaDB
import ENSTestSupport
import SenderWire
import Testing

/// The database is untrusted storage, by inventory (Sources/ENSStore/ColumnInventory.swift,
/// docs/security.md "A writer to the database"). `theInventoryIsTheLiveSchema` holds the
/// declaration to what MariaDB has; `everyBoundColumnEditedIsRefused` edits each `.bound`
/// column of a live row in MariaDB, as a writer without the master key would, drives the
/// path that reads it, and shows: nothing pushed, nothing sent to a server of the
/// writer's, nothing read back, and the refusal logged. A bound column without a
/// scenario here fails the test, so a new one cannot be left out.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct RowTamperingTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("row-tampering-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.domain("evil.test", mode: "hostile")
    }

    @Test func theInventoryIsTheLiveSchema() throws {
        let live = try database.query("""
            SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE()
            """).map { "\(try $0.decode(String.self, String.self).0).\(try $0.decode(String.self, String.self).1)" }
        let named = ColumnInventory.columns.map { "\($0.table).\($0.name)" }
        #expect(Set(live) == Set(named),
                "not in the inventory: \(Set(live).subtracting(named).sorted()); not in MariaDB: \(Set(named).subtracting(live).sorted())")
        #expect(named.count == Set(named).count, "a column named twice")
        // What binds a column is a MAC or a sealed column of its own table.
        for column in ColumnInventory.columns {
            guard case .bound(let by) = column.protection else { continue }
            let binder = ColumnInventory.columns.first { $0.table == column.table && $0.name == by }
            switch binder?.protection {
            case .mac?, .sealed?: break
            default: Issue.record("\(column.table).\(column.name) is bound by \(by), which is no MAC or sealed column of its table")
            }
        }
    }

    // MARK: The scenarios

    /// What a writer does to one bound column, and what must then hold.
    struct Scenario: Sendable {
        /// The edit and its checks, run by this suite.
        let run: @Sendable (RowTamperingTests) throws -> Void
    }

    func log() throws -> String { try String(contentsOfFile: TestStack.directory + "/log/ens-fcgi.log", encoding: .utf8) }

    func refusalsLogged(_ table: String) throws -> Int {
        try log().components(separatedBy: "\n").filter { $0.contains("row refused") && $0.contains("table=\(table)") }.count
    }

    func requests(to host: String) throws -> Int {
        try ExchangeSimulator.requests().filter { ($0["host"] as? String) == host }.count
    }

    /// A device row edited: the device is no device. Its own history is refused, a
    /// writer's device copied into it reads nothing, new mail pushes nothing to either.
    func deviceEdited(_ column: String, ofWriters: Bool = false, to value: @Sendable (_ victimRow: Int64, _ writerRow: Int64) -> String) throws {
        let victim = try RegisteredUser.register(with: api)
        let writer = try RegisteredUser.register(with: api)
        let rows = try [victim, writer].map { user in
            try #require(try database.queryOne("""
                SELECT d.id FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(user.user.userID)
                """)).decode(Int64.self)
        }
        let before = try refusalsLogged("Devices")
        try database.execute("UPDATE Devices SET \(unsafe: column) = \(unsafe: value(rows[0], rows[1])) WHERE id = \(ofWriters ? rows[1] : rows[0])")
        // The edited row: the victim's, or the writer's own moved into the victim's record.
        let edited = ofWriters ? writer : victim
        let subject = "Tampered \(column) \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(victim.user.email, subject: subject, fromName: "Ann Example")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(APNsSimulator.accepted().filter { $0.token == edited.token || $0.token == writer.token }
            .allSatisfy { !String(describing: $0.payload).contains(subject) }, "\(column): pushed")
        // The edited device reads nothing of the victim's, with its own token and secret.
        let info = try victim.user.sealForDevice(["pushToken": edited.token], token: edited.token, for: "getnotificationhistory.info")
        let answer = try api.call("/getnotificationhistory", ["userid": victim.user.userID, "info": info])
        #expect(answer.bodyText == #"{"responseCode":"UserSubscriptionNotFound"}"#, "\(column): \(answer.bodyText)")
        #expect(try refusalsLogged("Devices") > before, "\(column): not logged")
    }

    /// An Autodiscover answer edited: the next user of the domain sends nothing to
    /// the writer's host, and registers through Autodiscover at its own server.
    func urlCacheEdited(_ edit: String, nextUserAt domain: String = "pox.test") throws {
        _ = try RegisteredUser.register(with: api)  // pox.test's answer cached
        try ExchangeSimulator.domain(domain, mode: "pox-root")
        let before = try refusalsLogged("EWSUrlCache")
        try database.execute(Query(unsafeSQL: edit))
        let evil = try requests(to: "mail.evil.test")
        let next = try RegisteredUser.register(with: api, email: "n\(UUID().uuidString.prefix(8).lowercased())@\(domain)")
        let url = try #require(try database.queryOne("""
            SELECT backend_url
            FROM EnsSubscriptionInfo
            WHERE userid = \(next.user.userID)
            """)).decode(String.self)
        #expect(url.contains(domain), "subscribed at \(url)")
        #expect(try requests(to: "mail.evil.test") == evil, "credentials went to the writer's host")
        #expect(try refusalsLogged("EWSUrlCache") > before, "\(edit): not logged")
    }

    /// A subscription row edited: its callback looks nothing up with the opened
    /// credentials, sends nothing to the writer's host and pushes nothing.
    func subscriptionEdited(_ column: String, to value: String) throws {
        let victim = try RegisteredUser.register(with: api)
        let evil = try requests(to: "mail.evil.test")
        let failures = try log().components(separatedBy: "fails its integrity check").count
        try database.execute("SET foreign_key_checks = 0")
        defer { _ = try? database.execute("SET foreign_key_checks = 1") }
        try database.execute("UPDATE EnsSubscriptionInfo SET \(unsafe: column) = \(unsafe: value) WHERE userid = \(victim.user.userID)")
        let subject = "Tampered \(column) \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(victim.user.email, subject: subject, fromName: "Ann Example")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(victim.pushes(to: victim.token, subject: subject).isEmpty, "\(column): pushed with its subject")
        #expect(try requests(to: "mail.evil.test") == evil, "\(column): sent to the writer's host")
        #expect(try log().components(separatedBy: "fails its integrity check").count > failures, "\(column): not logged")
    }

    /// A blind subscription edited: Graph's POSTs for it push nothing.
    /// `found: false`: the edit takes the row from where the POST's sealed URL looks
    /// for it (its id, its record), so it is not read at all and nothing is logged.
    func blindEdited(_ column: String, to value: String, found: Bool = true) throws {
        let blind = try BlindModeTests()
        let user = try GraphMailboxUser.register(with: api)
        let key = try BlindModeTests.DeviceKey.make()
        try #require(try blind.registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        let before = try refusalsLogged("GraphBlindSubscriptions")
        try database.execute("SET foreign_key_checks = 0")
        defer { _ = try? database.execute("SET foreign_key_checks = 1") }
        let row = try #require(try database.queryOne("""
            SELECT b.id FROM GraphBlindSubscriptions b JOIN EnsSubscriptionInfo s ON s.id = b.record_id WHERE s.userid = \(user.user.userID)
            """)).decode(Int64.self)
        try database.execute("UPDATE GraphBlindSubscriptions SET \(unsafe: column) = \(unsafe: value) WHERE id = \(row)")
        _ = try blind.privateMail(user, "Tampered blind \(column)")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(blind.blindPushes(to: user.token).isEmpty, "\(column): pushed")
        if found { #expect(try refusalsLogged("GraphBlindSubscriptions") > before, "\(column): not logged") }
    }

    /// A cached signing key edited (and no fetch allowed for a minute): no validation
    /// token is checked against it, and the batch it would have passed pushes nothing.
    func signingKeyEdited(_ column: String, to value: String) throws {
        let blind = try BlindModeTests()
        let user = try GraphMailboxUser.register(with: api)
        let key = try BlindModeTests.DeviceKey.make()
        try #require(try blind.registerBlind(user, token: user.token, key: key).json["privacy"] == "blind")
        _ = try blind.privateMail(user, "Before the key edit \(column)")
        try #require(TestStack.eventually(within: 10) { !blind.blindPushes(to: user.token).isEmpty })
        let delivered = blind.blindPushes(to: user.token).count
        let before = try refusalsLogged("GraphSigningKeys")
        try database.execute("UPDATE GraphSigningKeys SET \(unsafe: column) = \(unsafe: value) WHERE kid <> ''")
        try database.execute("UPDATE GraphSigningKeys SET fetched_at = NOW(3) WHERE kid = ''")
        // A token naming a key the responder does not hold makes it read the cached keys
        // again (the path a writer's own key would take), and fetching is not due.
        _ = try GraphSimulator.control("/mode", ["blindFault": "unknown-kid"])
        defer { _ = try? GraphSimulator.control("/mode", ["blindFault": "none"]) }
        _ = try blind.privateMail(user, "After the key edit \(column)")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(blind.blindPushes(to: user.token).count == delivered, "\(column): pushed")
        #expect(try refusalsLogged("GraphSigningKeys") > before, "\(column): not logged")
        try database.execute("UPDATE GraphSigningKeys SET fetched_at = '2000-01-01' WHERE kid = ''")
    }

    /// ens-sender writes the log rows the responders seal (PushNotification.logRow), and
    /// holds no key of its own for them: a notification handed to it on its socket with
    /// a history entry sealed for another notification, or with bytes of its own, adds a
    /// row that opens for no one. The device's history shows neither, and both are logged.
    @Test func aLogRowSealedElsewhereAndHandedToTheSenderOpensForNoOne() throws {
        let victim = try RegisteredUser.register(with: api)
        let subject = "Logged genuinely \(UUID().uuidString.prefix(6))"
        try #require(try victim.mailReaches(victim.token, subject: subject))
        let (deviceID, genuine) = try #require(try database.queryOne("""
            SELECT l.device_id, l.summary_sealed FROM NotificationLog l JOIN Devices d ON d.id = l.device_id
              JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(victim.user.userID)
            """)).decode(Int64.self, [UInt8].self)
        let forged = [genuine, Array("a history entry of the submitter's own".utf8)].map { summary in
            let id = Hex.encode((0..<16).map { _ in UInt8.random(in: 0...255) })
            return PushNotification(
                id: id, deviceToken: DeviceToken(hex: victim.token)!, topic: "com.example.mail", environment: .sandbox, pushType: .alert,
                expiration: Int64(Date().timeIntervalSince1970) + 3600, payload: Array(#"{"aps":{"alert":"-"}}"#.utf8), deviceRowID: deviceID,
                logRow: PushNotification.LogRow(createdAtMilliseconds: Int64(Date().timeIntervalSince1970 * 1000), summarySealed: summary))
        }
        let before = try refusalsLogged("NotificationLog")
        let client = SenderClient(socketPath: TestStack.directory + "/run/apns.sock")
        for notification in forged { #expect(try client.submit(notification) == .accepted) }
        let ids = forged.map(\.id)
        #expect(try TestStack.eventually(within: 10) {
            let row = try database.queryOne("SELECT COUNT(*) FROM NotificationLog WHERE LOWER(HEX(id)) IN (\(list: ids))")
            let count: Int64? = try row.map { row throws in try row.decode(Int64.self) }
            return count == 2
        }, "the sender wrote both rows")
        let info = try victim.user.sealForDevice(["pushToken": victim.token], token: victim.token, for: "getnotificationhistory.info")
        let answer = try api.call("/getnotificationhistory", ["userid": victim.user.userID, "info": info])
        #expect(answer.bodyText.contains(subject) && ids.allSatisfy { !answer.bodyText.contains($0) }, "\(answer.bodyText)")
        #expect(try refusalsLogged("NotificationLog") >= before + 2, "not logged")
    }

    /// A history entry moved to the writer's device, or given another id: it opens for
    /// no one (its seal names its notification and device).
    func logEntryEdited(_ column: String, to value: (_ writerDevice: Int64) -> String) throws {
        let victim = try RegisteredUser.register(with: api)
        let writer = try RegisteredUser.register(with: api)
        let subject = "Logged \(column) \(UUID().uuidString.prefix(6))"
        try #require(try victim.mailReaches(victim.token, subject: subject))
        let writerDevice = try #require(try database.queryOne("""
            SELECT d.id FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(writer.user.userID)
            """)).decode(Int64.self)
        let before = try refusalsLogged("NotificationLog")
        try database.execute("""
            UPDATE NotificationLog l JOIN Devices d ON d.id = l.device_id JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            SET l.\(unsafe: column) = \(unsafe: value(writerDevice)) WHERE s.userid = \(victim.user.userID)
            """)
        for user in [victim, writer] {
            let info = try user.user.sealForDevice(["pushToken": user.token], token: user.token, for: "getnotificationhistory.info")
            let answer = try api.call("/getnotificationhistory", ["userid": user.user.userID, "info": info])
            #expect(answer.bodyText.hasSuffix(#""responseCode":"NotificationHistory"}"#) && !answer.bodyText.contains(subject),
                    "\(column): \(answer.bodyText)")
        }
        #expect(try refusalsLogged("NotificationLog") > before, "\(column): not logged")
    }

    func recordID(_ user: RegisteredUser) throws -> Int64 {
        try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)")?.decode(Int64.self))
    }

    func tokenHash(_ token: String) throws -> [UInt8] {
        Vault(masterKey: try TestStack.masterKey()).tokenHash(try #require(DeviceToken(sent: token)))
    }

    func unregister(_ user: RegisteredUser, _ token: String) throws -> String? {
        try api.call("/unregister", ["userid": user.user.userID,
                                     "token": try user.user.sealForDevice(["apnsToken": token], token: token,
                                                                          for: "unregister.token")]).json["responseCode"]
    }

    /// A credential row's supplier edited, so that the credentials would outlive the
    /// device that gave them: the owner's phone registered the subscription, a second
    /// phone joined (its proven credentials wait as a fresh row). The writer relabels
    /// one row's supplier (`edit`, given both token hashes); then the row's real
    /// supplier leaves. Its credentials go anyway (refused, logged), and what the
    /// other phone supplied stays in use.
    func supplierEdited(_ table: String, leaving: (_ owner: String, _ second: String) -> String,
                        edit: (_ owner: [UInt8], _ second: [UInt8]) -> String) throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        let second = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        let before = try refusalsLogged(table)
        try database.execute("""
            UPDATE \(unsafe: table) SET supplied_by = \(unsafe: edit(try tokenHash(user.token), try tokenHash(second))) WHERE record_id = \(record)
            """)
        let gone = leaving(user.token, second)
        #expect(try unregister(user, gone) == "DeviceUnregistered")
        let left = try database.query("SELECT supplied_by FROM \(unsafe: table) WHERE record_id = \(record)").map { try $0.decode([UInt8]?.self) }
        #expect(left.isEmpty, "\(table): a row the departed device supplied is still there")
        #expect(try refusalsLogged(table) > before, "\(table): not logged")
        if table == "MailCredentialsFresh" {
            // The owner's own credentials still deliver, with sender and subject.
            #expect(try user.mailReaches(user.token, subject: "Still the owner's \(UUID().uuidString.prefix(6))"))
        } else {
            let state = try #require(try database.queryOne("SELECT registered FROM EnsSubscriptionInfo WHERE id = \(record)")).decode(Bool.self)
            #expect(!state, "the subscription runs on without its supplier")
        }
    }

    /// A claim edited (migration 024): relabelled for another user or server, it is no
    /// claim. Its callbacks push nothing (its pushes would name the user it is for) and
    /// the owner's check-in finds no subscription of theirs in it.
    func claimEdited(_ column: String, to value: String) throws {
        try ExchangeSimulator.domain("nowhere.test", mode: "none")
        let (owner, squatter) = try SquattingTests.squattedOwner(api: api, domain: "nowhere.test")
        let email = owner.user.email
        try #require(try owner.register(with: api, token: owner.token, creds: owner.creds(
            token: owner.token, ewsURL: "https://mail.nowhere.test/EWS/Exchange.asmx")).json["responseCode"] == "UserSubscribed")
        let failures = try log().components(separatedBy: "fails its integrity check").count
        try database.execute("UPDATE EnsSubscriptionInfo SET \(unsafe: column) = \(unsafe: value) WHERE claim_of = \(owner.user.userID)")
        let subject = "Tampered claim \(column) \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(email, subject: subject, fromName: "Ann Example")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(owner.pushes(to: owner.token, subject: subject).isEmpty, "\(column): pushed")
        #expect(owner.pushes(to: squatter, subject: subject).isEmpty, "\(column): pushed to the squatter")
        #expect(try log().components(separatedBy: "fails its integrity check").count > failures, "\(column): not logged")
    }

    /// The freshness counter (`EnsSubscriptionInfo.device_epoch`): a device row saved
    /// while its mode was `preview`, restored alone with its MAC after the device moved
    /// to `secure`, is no device: new mail pushes no sender or subject to it.
    @Test func anOlderDeviceRowRestoredAloneIsRefused() throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        let saved = try #require(try database.queryOne("""
            SELECT id, privacy_mode, preview_key, binding_mac FROM Devices WHERE subscription_row = \(record)
            """))
        let (id, mode, key, mac) = try saved.decode(Int64.self, Int64.self, [UInt8]?.self, [UInt8].self)
        let info: [String: Any] = ["pushToken": user.token, "privacy": "secure", "deviceSecret": TestSecrets.deviceSecret(for: user.token)]
        let changed = try api.call("/updateprivacy", ["userid": user.user.userID, "info": try user.user.sealJSON(info, for: "updateprivacy.info")])
        try #require(changed.json["privacy"] == "secure", "\(changed.bodyText)")
        #expect(try database.queryOne("SELECT device_epoch FROM EnsSubscriptionInfo WHERE id = \(record)")?.decode(Int64.self) ?? 0 > 0)
        let before = try refusalsLogged("Devices")
        try database.execute("UPDATE Devices SET privacy_mode = \(mode), preview_key = \(key), binding_mac = \(mac) WHERE id = \(id)")
        let subject = "Restored row \(UUID().uuidString.prefix(6))"
        _ = try ExchangeSimulator.newMail(user.user.email, subject: subject, fromName: "Ann Example")
        Thread.sleep(forTimeInterval: 1.5)
        #expect(user.pushes(to: user.token, subject: subject).isEmpty, "the restored preview row was pushed the subject")
        #expect(try refusalsLogged("Devices") > before, "not logged")
    }

    static let evilURL = "'https://mail.evil.test/EWS/Exchange.asmx'"

    /// A registered Dovecot server's row edited: it is no server. No password goes to
    /// its IMAP URL (no login reaches the real one either), its pushes are refused, and
    /// the refusal is logged.
    func dovecotServerEdited(_ column: String, to value: @Sendable (_ name: String) -> String) throws {
        let name = "tamper-" + column.filter(\.isLetter).lowercased().prefix(16)
        let domain = "\(name).test"
        let dovecot = try DovecotTests.registeredDovecot(name, domain: domain)
        defer { dovecot.stop() }
        let account = try DovecotTests.Account.make(on: dovecot, domain: domain, api: api)
        let before = try refusalsLogged("DovecotServers")
        try database.execute("UPDATE DovecotServers SET \(unsafe: column) = \(unsafe: value(name)) WHERE name = \(name)")
        let logins = dovecot.log.components(separatedBy: "Login: ").count
        let answer = try account.register(with: api)
        #expect(answer.json["responseCode"] != "UserSubscribed", "\(column): registered at an edited server")
        #expect(dovecot.log.components(separatedBy: "Login: ").count == logins, "\(column): a password was sent")
        #expect(try refusalsLogged("DovecotServers") > before, "\(column): not logged")
        _ = try? database.execute("DELETE FROM DovecotServers WHERE name LIKE 'tamper-%'")
    }

    static let scenarios: [String: Scenario] = [
        // DovecotServers (binding_mac): each column given another value.
        "DovecotServers.name": Scenario { try $0.dovecotServerEdited("name") { name in "'\(name)-x'" } },
        "DovecotServers.imap_url": Scenario { try $0.dovecotServerEdited("imap_url") { _ in "'imaps://127.0.0.2:993/'" } },
        "DovecotServers.domains": Scenario { try $0.dovecotServerEdited("domains") { _ in "CONCAT(domains, ',evil.test')" } },
        "DovecotServers.ca_pem": Scenario { try $0.dovecotServerEdited("ca_pem") { _ in "NULL" } },
        "DovecotServers.driver": Scenario { try $0.dovecotServerEdited("driver") { _ in "'lua'" } },
        "DovecotServers.credential_serial": Scenario { try $0.dovecotServerEdited("credential_serial") { _ in "credential_serial + 1" } },
        // Devices (binding_mac): the writer's own device's values copied in, or others.
        "Devices.id": Scenario { try $0.deviceEdited("id") { victim, _ in "\(victim + 700_000_000)" } },
        // The writer's own device moved into the victim's record.
        "Devices.subscription_row": Scenario { try $0.deviceEdited("subscription_row", ofWriters: true) { victim, _ in
            "(SELECT subscription_row FROM (SELECT subscription_row FROM Devices WHERE id = \(victim)) v)" } },
        "Devices.token_hash": Scenario { try $0.deviceEdited("token_hash") { _, writer in
            "(SELECT token_hash FROM (SELECT token_hash FROM Devices WHERE id = \(writer)) w)" } },
        "Devices.secret_hash": Scenario { try $0.deviceEdited("secret_hash") { _, writer in
            "(SELECT secret_hash FROM (SELECT secret_hash FROM Devices WHERE id = \(writer)) w)" } },
        "Devices.bundle_id": Scenario { try $0.deviceEdited("bundle_id") { _, _ in "'com.example.other'" } },
        "Devices.privacy_mode": Scenario { try $0.deviceEdited("privacy_mode") { _, _ in "3" } },
        "Devices.preview_key": Scenario { try $0.deviceEdited("preview_key") { _, _ in "UNHEX(SHA2('writer', 256))" } },
        "Devices.endpoint": Scenario { try $0.deviceEdited("endpoint") { _, _ in "'https://mail.evil.test:443'" } },
        // EWSUrlCache (binding_mac): pox.test's authentic answer is copied to bench.test
        // first (a row of another domain), then edited.
        "EWSUrlCache.ews_url": Scenario { try $0.urlCacheEdited("UPDATE EWSUrlCache SET ews_url = \(evilURL) WHERE domain = 'pox.test'") },
        "EWSUrlCache.expires_at": Scenario { try $0.urlCacheEdited("""
            UPDATE EWSUrlCache SET expires_at = expires_at + INTERVAL 1 YEAR, ews_url = ews_url WHERE domain = 'pox.test'
            """) },
        // pox.test's authentic answer relabelled for another domain.
        "EWSUrlCache.domain": Scenario { try $0.urlCacheEdited("""
            REPLACE INTO EWSUrlCache (domain, ews_url, expires_at, binding_mac)
            SELECT 'bench.test', ews_url, expires_at, binding_mac FROM EWSUrlCache WHERE domain = 'pox.test'
            """, nextUserAt: "bench.test") },
        // EnsSubscriptionInfo (binding_mac): the subscription's place.
        "EnsSubscriptionInfo.id": Scenario { try $0.subscriptionEdited("id", to: "id + 700000000") },
        "EnsSubscriptionInfo.generation": Scenario { try $0.subscriptionEdited("generation", to: "generation + 1") },
        "EnsSubscriptionInfo.mail_backend": Scenario { try $0.subscriptionEdited("mail_backend", to: "'graph'") },
        "EnsSubscriptionInfo.backend_url": Scenario { try $0.subscriptionEdited("backend_url", to: evilURL) },
        "EnsSubscriptionInfo.backend_tenant": Scenario { try $0.subscriptionEdited("backend_tenant", to: "'00000000-0000-0000-0000-0000000e0000'") },
        "EnsSubscriptionInfo.endpoint": Scenario { try $0.subscriptionEdited("endpoint", to: "'https://mail.evil.test:443'") },
        // GraphBlindSubscriptions (binding_mac): the certificates Graph encrypts to.
        "GraphBlindSubscriptions.id": Scenario { try $0.blindEdited("id", to: "id + 700000000", found: false) },
        "GraphBlindSubscriptions.record_id": Scenario { try $0.blindEdited("record_id", to: "record_id + 700000000", found: false) },
        "GraphBlindSubscriptions.thumbprint": Scenario { try $0.blindEdited("thumbprint", to: "UNHEX(SHA2('writer', 256))") },
        "GraphBlindSubscriptions.certificate": Scenario { try $0.blindEdited("certificate", to: "CONCAT(certificate, X'00')") },
        "GraphBlindSubscriptions.certificate_id": Scenario { try $0.blindEdited("certificate_id", to: "CONCAT(LEFT(certificate_id, 20), 'w')") },
        "GraphBlindSubscriptions.previous_thumbprint": Scenario { try $0.blindEdited("previous_thumbprint", to: "UNHEX(SHA2('writer', 256))") },
        "GraphBlindSubscriptions.previous_certificate_id": Scenario { try $0.blindEdited("previous_certificate_id", to: "'writers-certificate'") },
        "GraphBlindSubscriptions.resource": Scenario { try $0.blindEdited("resource", to: "CONCAT(resource, 'w')") },
        // GraphSigningKeys (binding_mac): a key of the writer's own would sign tokens.
        "GraphSigningKeys.kid": Scenario { try $0.signingKeyEdited("kid", to: "CONCAT(kid, 'w')") },
        "GraphSigningKeys.modulus": Scenario { try $0.signingKeyEdited("modulus", to: "CONCAT(X'00', modulus)") },
        "GraphSigningKeys.exponent": Scenario { try $0.signingKeyEdited("exponent", to: "X'03'") },
        // NotificationLog (sealed to notification and device).
        "NotificationLog.device_id": Scenario { try $0.logEntryEdited("device_id") { "\($0)" } },
        "NotificationLog.id": Scenario { try $0.logEntryEdited("id") { _ in "UNHEX(MD5(RAND()))" } },
        // A claim (claim_mac): moved to another user, or to another server.
        "EnsSubscriptionInfo.claim_of": Scenario { try $0.claimEdited("claim_of", to: "SHA2('someone-else@nowhere.test', 256)") },
        "EnsSubscriptionInfo.claim_endpoint": Scenario { try $0.claimEdited("claim_endpoint", to: "'https://mail.evil.test:443'") },
        // The suppliers (supplier_mac): cleared, or swapped for the other phone's.
        "MailCredentials.supplied_by": Scenario {
            try $0.supplierEdited("MailCredentials", leaving: { owner, _ in owner }) { _, _ in "NULL" }
            try $0.supplierEdited("MailCredentials", leaving: { owner, _ in owner }) { _, second in "X'\(Hex.encode(second))'" }
        },
        "MailCredentialsFresh.supplied_by": Scenario {
            try $0.supplierEdited("MailCredentialsFresh", leaving: { _, second in second }) { _, _ in "NULL" }
            try $0.supplierEdited("MailCredentialsFresh", leaving: { _, second in second }) { owner, _ in "X'\(Hex.encode(owner))'" }
        },
    ]

    @Test func everyBoundColumnEditedIsRefused() throws {
        let bound = ColumnInventory.columns.filter { if case .bound = $0.protection { return true } else { return false } }
            .map { "\($0.table).\($0.name)" }
        let covered = Set(Self.scenarios.keys).union(Self.coveredElsewhere.keys)
        #expect(Set(bound).subtracting(covered).isEmpty, "bound columns with no tampering scenario: \(Set(bound).subtracting(covered).sorted())")
        for name in bound.sorted() {
            guard let scenario = Self.scenarios[name] else { continue }
            try scenario.run(self)
        }
    }

    /// Bound columns whose tampering another suite shows, by its test.
    static let coveredElsewhere: [String: String] = [
        // The credentials' seals name record and generation: moved, they do not open.
        "MailCredentials.record_id": "ENSVaultTests.CredentialBoxTests.aBoxOpensOnlyForItsSubscription; SplitCredentialsTests",
        "MailCredentials.generation": "ENSVaultTests.CredentialBoxTests.aBoxOpensOnlyForItsSubscription; SplitCredentialsTests",
        "MailCredentials.box_public_key": "DatabaseWriterTests.aSwappedBoxKeyGetsNoFreshCredentials",
        "MailCredentialsFresh.record_id": "ENSVaultTests.CredentialBoxTests.aBoxOpensOnlyForItsSubscription",
        "MailCredentialsFresh.generation": "ENSVaultTests.CredentialBoxTests.aBoxOpensOnlyForItsSubscription",
        // The record's key is sealed to its userid: relabelled, it opens for no address.
        "EnsSubscriptionInfo.userid": "ENSVaultTests.VaultTests.userKeyIsBoundToItsUser",
    ]
}
