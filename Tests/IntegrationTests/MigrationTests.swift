import Curl
@testable import ENSStore
@testable import ENSVault
import Foundation
import MariaDB
import OpenSSL
import Testing
@testable import MailBackends
@testable import ENSModel

/// The numbered migrations on a database of their own: each one keeps the data written
/// under the schema before it.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct MigrationTests {
    /// Applies the repository's migrations up to `version` (copied to a scratch
    /// directory, as an operator's tree would hold them at that release).
    func migrate(_ database: Connection, through version: Int, then steps: [String: (Connection) throws -> Void] = [:]) throws -> [String] {
        let source = TestStack.root + "/sql/migrations"
        let scratch = NSTemporaryDirectory() + "ens-migrations-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        for name in try FileManager.default.contentsOfDirectory(atPath: source) where name.hasSuffix(".sql") {
            guard let number = Int(name.prefix(3)), number <= version else { continue }
            try FileManager.default.copyItem(atPath: source + "/" + name, toPath: scratch + "/" + name)
        }
        return try Migrator(directory: scratch, database: database).migrate(then: steps)
    }

    /// A database of its own for one test (dropped by `dropScratch`).
    func scratchDatabase() throws -> (Connection, name: String) {
        let name = "ens_migration_\(UInt32.random(in: 0...UInt32.max))"
        try TestStack.administratorConnection().executeScript(unsafeSQL: "CREATE DATABASE \(name)")
        return (TestStack.administratorConnection(database: name), name)
    }

    func dropScratch(_ name: String) {
        try? TestStack.administratorConnection().executeScript(unsafeSQL: "DROP DATABASE \(name)")
    }

    @Test func backendNeutralNamesKeepEverySubscriptionValue() throws {
        let (database, name) = try scratchDatabase()
        defer { dropScratch(name) }

        #expect(try migrate(database, through: 4).count == 4)
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, generation, ews_url,
                ews_subscription_id, ews_watermark, ews_version, status_frequency_minutes, last_callback_at)
            VALUES ('u1', 'pem', x'00', 1, 7, 'https://mail.example.test/EWS/Exchange.asmx', 'sub-1', 'wm-1', 'Exchange2013_SP1', 15,
                    '2026-11-24 10:00:00.000')
            """)
        try database.execute("""
            INSERT INTO EWSUrlCache (domain, ews_url, expires_at)
            VALUES ('example.test', 'https://mail.example.test/EWS/Exchange.asmx', '2030-01-01')
            """)

        #expect(try migrate(database, through: 5) == ["005_backend_neutral_names.sql"])
        let row = try #require(try database.queryOne("""
            SELECT registered, generation, mail_backend, backend_url, subscription_id, watermark, backend_version, heartbeat_minutes, last_callback_at
            FROM EnsSubscriptionInfo WHERE userid = 'u1'
            """))
        let (registered, generation, backend, url, subscription, watermark, version, heartbeat, lastCallback)
            = try row.decode(Bool.self, Int64.self, MailBackend.self, String.self, String.self, String.self, String.self, Int64.self, Timestamp.self)
        #expect(registered && generation == 7 && backend == .ews)
        #expect(url == "https://mail.example.test/EWS/Exchange.asmx" && subscription == "sub-1" && watermark == "wm-1")
        #expect(version == "Exchange2013_SP1" && heartbeat == 15 && lastCallback.databaseString == "2026-11-24 10:00:00.000")
        // What stays EWS's own keeps its name.
        #expect(try database.queryOne("""
            SELECT ews_url
            FROM EWSUrlCache
            WHERE domain = 'example.test'
            """)?.text(0) == "https://mail.example.test/EWS/Exchange.asmx")
        let oldColumns = try database.queryOne("""
            SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = \(name) AND TABLE_NAME = 'EnsSubscriptionInfo'
              AND COLUMN_NAME IN ('ews_url', 'ews_subscription_id', 'ews_watermark', 'ews_version', 'status_frequency_minutes')
            """)?.int(0)
        #expect(oldColumns == 0)

        // The migration is idempotent: run again by hand (as an operator re-running a
        // script might), it changes nothing and fails nothing.
        let script = try String(contentsOfFile: TestStack.root + "/sql/migrations/005_backend_neutral_names.sql", encoding: .utf8)
        for statement in Migrator.statements(in: script) { try database.executeScript(unsafeSQL: statement) }
        #expect(try database.queryOne("SELECT backend_url FROM EnsSubscriptionInfo WHERE userid = 'u1'")?.text(0) == url)
    }

    /// Migration 013 binds existing subscriptions and devices to the server the record
    /// subscribes at, computing in SQL what `URLParts.origin` computes for new ones: the
    /// two must agree, or the devices of old records would stop hearing their mail.
    @Test func provenEndpointsOfOldRecordsMatchWhatTheCodeComputes() throws {
        let (database, name) = try scratchDatabase()
        defer { dropScratch(name) }
        _ = try migrate(database, through: 12)
        let urls = [
            "https://mail.example.test/EWS/Exchange.asmx", "https://Mail.Example.TEST:8443/EWS/Exchange.asmx",
            "https://mail.example.test:443/ews/exchange.asmx", "https://[2001:db8::1]/EWS/Exchange.asmx",
            "https://[2001:db8::1]:8443/EWS/Exchange.asmx", "http://legacy.example.test/EWS/Exchange.asmx",
            "https://outlook.office365.com/EWS/Exchange.asmx?x=1",
        ]
        for (index, url) in urls.enumerated() {
            try database.execute("""
                INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, mail_backend, backend_url, subscription_id)
                VALUES (\("u\(index)"), 'pem', x'00', 1, 'ews', \(url), 'sub')
                """)
            try database.execute("""
                INSERT INTO Devices (subscription_row, token_hash, token_sealed) SELECT id, \(Array(repeating: UInt8(index), count: 32)), x'00'
                FROM EnsSubscriptionInfo WHERE userid = \("u\(index)")
                """)
        }
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered,
                                             mail_backend, backend_url, backend_tenant, subscription_id)
            VALUES ('g', 'pem', x'00', 1, 'graph', 'users/1', 'tenant-1', 'sub')
            """)
        #expect(try migrate(database, through: 13).contains("013_proven_endpoints.sql"))
        for (index, url) in urls.enumerated() {
            let row = try #require(try database.queryOne("""
                SELECT s.endpoint, d.endpoint FROM EnsSubscriptionInfo s JOIN Devices d ON d.subscription_row = s.id WHERE s.userid = \("u\(index)")
                """))
            let expected = try #require(URLParts(url)?.origin)
            #expect(try row.optionalText(0) == expected, "\(url)")
            #expect(try row.optionalText(1) == expected, "\(url)")
        }
        #expect(try database.queryOne("SELECT endpoint FROM EnsSubscriptionInfo WHERE userid = 'g'")?.optionalText(0) == "graph:tenant-1")
    }

    /// Migration 014 binds the rows already there to the master key as `ens-cron
    /// migrate` applies it (and only then); from then on an edited URL or box key fails.
    @Test func rowsFromBeforeFourteenAreBoundOnceAndEditsFailAfter() throws {
        let (database, name) = try scratchDatabase()
        defer { dropScratch(name) }
        _ = try migrate(database, through: 13)
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, generation, mail_backend, backend_url,
                endpoint, subscription_id)
            VALUES ('u', 'pem', x'00', 1, 3, 'ews', 'https://mail.example.test/EWS/Exchange.asmx', 'https://mail.example.test:443', 'sub')
            """)
        let recordID = try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = 'u'")?.int(0))
        let boxKey = try P256KeyAgreementKey.generate().publicKey.x963
        try database.execute("""
            INSERT INTO MailCredentials (record_id, generation, sealed, box_public_key, created_at) VALUES (\(recordID), 3, x'00', \(boxKey), NOW(3))
            """)
        let vault = Vault(masterKey: try AESGCMKey(bytes: Digest.randomBytes(32)))
        let applied = try migrate(database, through: 14, then: [
            RowBindingBackfill.migration: { connection in try RowBindingBackfill(database: connection, vault: vault).run() },
        ])
        #expect(applied.contains(RowBindingBackfill.migration))
        let store = MailSubscriptionStore(database: database, vault: vault)
        #expect(try store.subscriptionState(recordID: recordID)?.isAuthentic == true)
        #expect(try store.liveBoxKey(recordID: recordID, endpoint: "https://mail.example.test:443") == .key(generation: 3, publicKey: boxKey))
        // Another master key's MACs do not pass.
        let other = MailSubscriptionStore(database: database, vault: Vault(masterKey: try AESGCMKey(bytes: Digest.randomBytes(32))))
        #expect(try other.subscriptionState(recordID: recordID)?.isAuthentic == false)
        // Edits after the migration fail, and migrate (up to date) binds nothing again.
        try database.execute("""
            UPDATE EnsSubscriptionInfo
            SET backend_url = 'https://mail.evil.test/EWS/Exchange.asmx', binding_mac = NULL
            WHERE id = \(recordID)
            """)
        let writersKey = try P256KeyAgreementKey.generate().publicKey.x963
        try database.execute("UPDATE MailCredentials SET box_public_key = \(writersKey) WHERE record_id = \(recordID)")
        #expect(try migrate(database, through: 14, then: [
            RowBindingBackfill.migration: { connection in try RowBindingBackfill(database: connection, vault: vault).run() },
        ]).isEmpty)
        #expect(try store.subscriptionState(recordID: recordID)?.isAuthentic == false)
        #expect(try store.subscriptionState(recordID: recordID)?.isLive == false)
        #expect(try store.liveBoxKey(recordID: recordID, endpoint: "https://mail.example.test:443") == .tampered)
    }

    /// Migration 023 binds the suppliers of the credentials already there (including a
    /// row from before 016, whose supplier is NULL) as `ens-cron migrate` applies it;
    /// from then on a supplier cleared or swapped fails, and a device leaving takes the
    /// credentials it supplied even when a writer relabelled them. Device rows keep
    /// their MACs (epoch 0 is the MAC of before).
    @Test func suppliersFromBeforeTwentyThreeAreBoundOnceAndEditsFailAfter() throws {
        let (database, name) = try scratchDatabase()
        defer { dropScratch(name) }
        _ = try migrate(database, through: 22)
        let vault = Vault(masterKey: try AESGCMKey(bytes: Digest.randomBytes(32)))
        let binding = RowBinding(vault: vault)
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, generation, mail_backend, endpoint)
            VALUES ('u', 'pem', x'00', 1, 3, 'ews', 'https://mail.example.test:443')
            """)
        let recordID = try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = 'u'")?.int(0))
        let owner = Digest.sha256("owner"), other = Digest.sha256("other")
        try database.execute("""
            INSERT INTO MailCredentials (record_id, generation, sealed, box_public_key, supplied_by, created_at)
            VALUES (\(recordID), 3, x'00', x'04', \(owner), NOW(3) - INTERVAL 1 DAY), (\(recordID), 2, x'00', x'04', NULL, NOW(3) - INTERVAL 1 DAY)
            """)
        try database.execute("""
            INSERT INTO MailCredentialsFresh (record_id, generation, box, supplied_by, created_at) VALUES (\(recordID), 3, x'0102', \(other), NOW(3))
            """)
        let deviceMAC = binding.device(id: 1, recordID: recordID, tokenHash: owner, bundleID: "b", privacyMode: 0, previewKey: nil,
                                       endpoint: "https://mail.example.test:443", secretHash: nil, epoch: 0)
        try database.execute("""
            INSERT INTO Devices (id, subscription_row, token_hash, token_sealed, bundle_id,
                                 privacy_mode, endpoint, registered_at, last_checkin_at, binding_mac)
            VALUES (1, \(recordID), \(owner), x'00', 'b', 0, 'https://mail.example.test:443', NOW(3), NOW(3), \(deviceMAC))
            """)
        let step: [String: (Connection) throws -> Void] = [
            RowBindingBackfill.migration023: { connection in try RowBindingBackfill(database: connection, vault: vault).runCredentialSuppliers() },
        ]
        #expect(try migrate(database, through: 23, then: step).contains(RowBindingBackfill.migration023))
        for row in try database.query("SELECT generation, supplied_by, supplier_mac FROM MailCredentials WHERE record_id = \(recordID)") {
            let (generation, supplier, mac) = try row.decode(Int64.self, [UInt8]?.self, [UInt8]?.self)
            #expect(RowBinding.matches(mac, binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: supplier)))
        }
        let fresh = try #require(try database.queryOne("SELECT supplier_mac FROM MailCredentialsFresh WHERE record_id = \(recordID)"))
        #expect(RowBinding.matches(try fresh.decode([UInt8]?.self), binding.freshSupplier(recordID: recordID, generation: 3, suppliedBy: other,
                                                                                            box: [1, 2])))
        let devices = SubscriptionStore(database: database, vault: vault)
        #expect(try devices.devices(recordID: recordID).map(\.id) == [1])

        // Nothing left to bind once it is applied; an edit after it fails. The owner's
        // credentials, relabelled as the other device's, go when the owner leaves, and
        // the NULL-supplier row of before 016 stays (it is what it was).
        try database.execute("UPDATE MailCredentials SET supplied_by = \(other) WHERE record_id = \(recordID) AND generation = 3")
        #expect(try migrate(database, through: 23, then: step).isEmpty)
        try database.execute("DELETE FROM Devices WHERE id = 1")
        _ = try CredentialErasure(database: database).deviceLeft(recordID: recordID, tokenHash: owner, binding: binding)
        let left = try database.query("SELECT generation FROM MailCredentials WHERE record_id = \(recordID)").map { try $0.decode(Int64.self) }
        #expect(left == [2])
        #expect(try database.queryOne("SELECT registered FROM EnsSubscriptionInfo WHERE id = \(recordID)")?.int(0) == 0)
    }

    /// A contract step (NNN_contract_*.sql) runs only when no host runs an older release
    /// than its header names: refused while one does, naming it, and applied once every
    /// host is at that release.
    @Test func aContractStepWaitsForEveryHostsRelease() throws {
        let (database, name) = try scratchDatabase()
        defer { dropScratch(name) }
        _ = try migrate(database, through: 25)
        let scratch = NSTemporaryDirectory() + "ens-contract-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        for file in try FileManager.default.contentsOfDirectory(atPath: TestStack.root + "/sql/migrations") where file.hasSuffix(".sql") {
            try FileManager.default.copyItem(atPath: TestStack.root + "/sql/migrations/" + file, toPath: scratch + "/" + file)
        }
        try """
            -- contract: requires release 9.1.0
            ALTER TABLE EnsSubscriptionInfo DROP COLUMN IF EXISTS proof_failures;
            """.write(toFile: scratch + "/900_contract_unused_counters.sql", atomically: true, encoding: .utf8)
        try database.execute("""
            INSERT INTO SenderHosts (host, spool_entries, heartbeat_at, release_version)
            VALUES ('host-a', 0, NOW(3), '9.1.0'), ('host-b', 0, NOW(3), '9.0.7'), ('host-c', 0, NOW(3), NULL)
            """)
        let migrator = Migrator(directory: scratch, database: database)
        #expect {
            try migrator.migrate()
        } throws: { error in
            let text = "\(error)"
            return text.contains("host-b runs 9.0.7") && text.contains("host-c runs a release before 0.2.0") && !text.contains("host-a")
        }
        #expect(try database.queryOne("SELECT COUNT(*) FROM schema_migrations WHERE version = 900")?.int(0) == 0)
        try database.execute("UPDATE SenderHosts SET release_version = '9.10.0' WHERE host = 'host-b'")
        try database.execute("DELETE FROM SenderHosts WHERE host = 'host-c'")
        #expect(try migrator.migrate() == ["900_contract_unused_counters.sql"])
    }
}
