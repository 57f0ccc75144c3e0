import ENSCore
import Foundation
import MariaDB
import Testing

/// The numbered migrations on a database of their own: each one keeps the data written
/// under the schema before it.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct MigrationTests {
    /// Applies the repository's migrations up to `version` (copied to a scratch
    /// directory, as an operator's tree would hold them at that release).
    func migrate(_ database: Connection, through version: Int) throws -> [String] {
        let source = TestStack.root + "/sql/migrations"
        let scratch = NSTemporaryDirectory() + "ens-migrations-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        for name in try FileManager.default.contentsOfDirectory(atPath: source) where name.hasSuffix(".sql") {
            guard let number = Int(name.prefix(3)), number <= version else { continue }
            try FileManager.default.copyItem(atPath: source + "/" + name, toPath: scratch + "/" + name)
        }
        return try Migrator(directory: scratch, database: database).migrate()
    }

    @Test func backendNeutralNamesKeepEverySubscriptionValue() throws {
        let name = "ens_migration_\(UInt32.random(in: 0...UInt32.max))"
        let admin = TestStack.administratorConnection()
        try admin.executeScript(unsafeSQL: "CREATE DATABASE \(name)")
        defer { try? admin.executeScript(unsafeSQL: "DROP DATABASE \(name)") }
        let database = TestStack.administratorConnection(database: name)

        #expect(try migrate(database, through: 4).count == 4)
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, generation, ews_url,
                ews_subscription_id, ews_watermark, ews_version, status_frequency_minutes, last_callback_at)
            VALUES ('u1', 'pem', x'00', 1, 7, 'https://mail.example.test/EWS/Exchange.asmx', 'sub-1', 'wm-1', 'Exchange2013_SP1', 15,
                    '2026-11-24 10:00:00.000')
            """)
        try database.execute("INSERT INTO EWSUrlCache (domain, ews_url, expires_at) VALUES ('example.test', 'https://mail.example.test/EWS/Exchange.asmx', '2030-01-01')")

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
        #expect(try database.queryOne("SELECT ews_url FROM EWSUrlCache WHERE domain = 'example.test'")?.text(0) == "https://mail.example.test/EWS/Exchange.asmx")
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
}
