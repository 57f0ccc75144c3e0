import Curl
import Foundation
import MariaDB
import OpenSSL
import POSIX
import Testing

/// Records sharded by user (docs/scaling.md), on the stack's own MariaDB: a second
/// schema is shard 1, a map gives it buckets 800-fff (userids from 8 on), and the pool
/// and the sender restart with the map. Users of both shards register, get mail through
/// nginx from the simulators, and are kept by ens-cron; URLs made before the map still
/// deliver (shard 0). The map is taken away again after, so the other suites run
/// without one.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct ShardingTests {
    static let schema = "ens_shard1"
    /// The tables that follow their user (Shards.swift).
    static let userTables = [
        "EnsSubscriptionInfo", "Devices", "MailCredentials", "MailCredentialsFresh", "NotificationLog", "MailItemsSeen", "ProofFailures",
        "GraphBlindSubscriptions", "EWSUrlCache",
    ]

    let api: DeviceClient
    let admin = TestStack.administratorConnection()
    let shard0: Connection
    let shard1: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("sharding-tests"))
        shard0 = try TestStack.serviceConnection()
        shard1 = try TestStack.serviceConnection(database: Self.schema)
    }

    @discardableResult
    func cron(_ arguments: [String], config: String = TestStack.configPath) throws -> String {
        try TestStack.run(TestStack.root + "/.build/debug/ens-cron", arguments + ["--config", config])
    }

    /// A new address of `domain` whose userid falls in shard 1's buckets (800-fff) or not.
    static func email(_ label: String, _ domain: String, onShard1: Bool) -> String {
        while true {
            let email = "\(label)\(UUID().uuidString.prefix(8).lowercased())@\(domain)"
            if (Digest.sha256(email)[0] >= 0x80) == onShard1 { return email }
        }
    }

    func count(_ database: Connection, _ query: Query) throws -> Int64 { try database.queryOne(query)?.int(0) ?? -1 }

    /// How many rows of `userID`'s record each schema holds.
    func records(_ userID: String) throws -> (shard0: Int64, shard1: Int64) {
        (try count(shard0, "SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(userID)"),
         try count(shard1, "SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(userID)"))
    }

    func devices(_ userID: String, on database: Connection) throws -> Int64 {
        try count(database, "SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(userID)")
    }

    func ewsCallbackURL(_ email: String) throws -> String {
        try #require(try ExchangeSimulator.subscriptions(of: email).last { $0["alive"] as? Bool == true }?["url"] as? String)
    }

    func graphNotificationURL(_ email: String) throws -> String {
        let answer = try GraphSimulator.control("/newmail", ["mail": email, "subject": "URL only", "deliver": false])
        return try #require(((answer["notifications"] as? [[String: Any]])?.first)?["url"] as? String)
    }

    /// Shard 0's per-user tables' rows read and changed so far (MariaDB's userstat).
    func shard0Activity() throws -> [String: Int64] {
        var activity: [String: Int64] = [:]
        for row in try admin.query("""
            SELECT TABLE_NAME, ROWS_READ + ROWS_CHANGED FROM information_schema.TABLE_STATISTICS WHERE TABLE_SCHEMA = 'ens'
            """) {
            let (table, rows) = try row.decode(String.self, Int64.self)
            if Self.userTables.contains(table) { activity[table] = rows }
        }
        return activity
    }

    /// Runs `body` with the map on: shard 1's schema made and migrated, the pool and the
    /// sender restarted; then the stack's own config back and both restarted again.
    func withShardMap(_ body: () throws -> Void) throws {
        try admin.execute("CREATE DATABASE IF NOT EXISTS `\(unsafe: Self.schema)` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        try admin.execute("GRANT ALL PRIVILEGES ON `\(unsafe: Self.schema)`.* TO 'ens_migrate'@'localhost'")
        try admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON `\(unsafe: Self.schema)`.* TO 'ens_service'@'localhost'")
        let mapPath = TestStack.directory + "/shards.map"
        try "# ShardingTests\nshard 1 buckets 800-fff socket \(TestStack.directory)/run/mysqld.sock name \(Self.schema)\n"
            .write(toFile: mapPath, atomically: true, encoding: .utf8)
        let original = try String(contentsOfFile: TestStack.configPath, encoding: .utf8)
        func restart() throws {
            for step in ["fcgi-stop", "sender-stop", "fcgi-start", "sender-start"] { try TestStack.stack(step) }
        }
        try (original + "\ndb.shard_map = \(mapPath)\n").write(toFile: TestStack.configPath, atomically: true, encoding: .utf8)
        defer {
            try? original.write(toFile: TestStack.configPath, atomically: true, encoding: .utf8)
            try? restart()
        }
        let migrated = try cron(["migrate"])
        #expect(migrated.contains("shard 1: applied: 001_initial.sql"), "\(migrated)")
        // Shard 1's ids start at 10^12, once: a bucket's rows can later move keeping them.
        #expect(migrated.contains("shard 1: ids from 1000000000000 in EnsSubscriptionInfo, Devices, MailCredentialsFresh, GraphBlindSubscriptions"),
                "\(migrated)")
        let again = try cron(["migrate"])
        #expect(again.contains("shard 1: schema is up to date") && !again.contains("ids from"), "\(again)")
        try restart()
        try body()
    }

    // MARK: The map is checked at start-up

    @Test func aMalformedMapStopsEveryProgramWithTheLineAndTheProblem() throws {
        let mapPath = TestStack.directory + "/bad-shards.map"
        let config = TestStack.directory + "/ens-bad-map.conf"
        try "shard 1 buckets 000-0ff socket /run/x.sock name ens\nshard 2 buckets 0f0-1ff socket /run/x.sock name ens2\n"
            .write(toFile: mapPath, atomically: true, encoding: .utf8)
        let original = try String(contentsOfFile: TestStack.configPath, encoding: .utf8)
        try (original + "\ndb.shard_map = \(mapPath)\n").write(toFile: config, atomically: true, encoding: .utf8)
        for program in ["ens-cron", "ens-fcgi", "ens-sender"] {
            let arguments = program == "ens-cron" ? ["reap", "--config", config] : ["--check", "--config", config]
            let (status, output) = try ChildProcess.run("/bin/sh",
                                                        ["-c", "\"$0\" \"$@\" 2>&1", TestStack.root + "/.build/debug/" + program] + arguments)
            #expect(status != 0, "\(program) started with a malformed map")
            #expect(output.contains("db.shard_map") && output.contains("line 2 of the map") && output.contains("bucket f0 is shard 1's already"),
                    "\(program): \(output)")
        }
    }

    // MARK: Records, callbacks and jobs on their user's shard

    @Test func recordsCallbacksAndJobsFollowTheirUsersShard() throws {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        // Before the map: URLs of the forms that name no bucket, on shard 0's buckets.
        let oldExchange = try RegisteredUser.register(with: api, email: Self.email("old", "pox.test", onShard1: false))
        let oldGraph = try GraphMailboxUser.register(with: api, email: Self.email("oldg", "contoso.test", onShard1: false))
        #expect(try ewsCallbackURL(oldExchange.user.email).contains("/ews/k2."))
        #expect(try graphNotificationURL(oldGraph.user.email).contains("/graph/r2."))

        try withShardMap {
            let exchange0 = try RegisteredUser.register(with: api, email: Self.email("s0", "pox.test", onShard1: false))
            let exchange1 = try RegisteredUser.register(with: api, email: Self.email("s1", "pox.test", onShard1: true))
            let graph0 = try GraphMailboxUser.register(with: api, email: Self.email("g0", "contoso.test", onShard1: false))
            let graph1 = try GraphMailboxUser.register(with: api, email: Self.email("g1", "contoso.test", onShard1: true))

            // Each record, its devices and its credentials are in its own shard only.
            for (user, onShard1) in [(exchange0.user, false), (exchange1.user, true), (graph0.user, false), (graph1.user, true)] {
                let (in0, in1) = try records(user.userID)
                #expect((in0, in1) == (onShard1 ? (0, 1) : (1, 0)), "\(user.email): shard 0 \(in0), shard 1 \(in1)")
                #expect(try devices(user.userID, on: onShard1 ? shard1 : shard0) == 1)
            }
            for (user, database) in [(exchange0.user, shard0), (exchange1.user, shard1)] {
                #expect(try count(database, """
                    SELECT COUNT(*) FROM MailCredentials c JOIN EnsSubscriptionInfo s ON s.id = c.record_id WHERE s.userid = \(user.userID)
                    """) >= 1)
            }
            #expect(try records(oldExchange.user.userID) == (1, 0) && records(oldGraph.user.userID) == (1, 0))
            let ids = try #require(try shard1.queryOne("""
                SELECT s.id, d.id FROM EnsSubscriptionInfo s JOIN Devices d ON d.subscription_row = s.id WHERE s.userid = \(exchange1.user.userID)
                """)).decode(Int64.self, Int64.self)
            #expect(ids.0 >= 1_000_000_000_000 && ids.0 < 2_000_000_000_000 && ids.1 >= 1_000_000_000_000, "\(ids)")

            // New URLs name their bucket; old ones still deliver, to shard 0.
            for user in [exchange0, exchange1] { #expect(try ewsCallbackURL(user.user.email).contains("/ews/k3."), "\(user.user.email)") }
            for user in [graph0, graph1] { #expect(try graphNotificationURL(user.user.email).contains("/graph/r3."), "\(user.user.email)") }
            for user in [exchange0, exchange1, oldExchange] {
                #expect(try user.mailReaches(user.token, subject: "Sharded EWS mail"), "\(user.user.email)")
            }
            for user in [graph0, graph1, oldGraph] {
                let deliveries = try GraphSimulator.newMail(user.user.email, subject: "Sharded Graph mail")
                #expect(GraphSimulator.statuses(deliveries) == [202], "\(user.user.email): \(deliveries)")
                #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "Sharded Graph mail").isEmpty },
                        "\(user.user.email)")
            }
            // The sender wrote its delivery back to the device's own shard.
            #expect(TestStack.eventually(within: 10) {
                (try? count(shard1, """
                    SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
                    WHERE s.userid = \(exchange1.user.userID) AND d.last_notified_at IS NOT NULL
                    """)) == 1
            })

            try deviceAPIOfAShard1UserLeavesShard0Alone(exchange1)
            try jobsRunOnEachShard(exchange1: exchange1, graph1: graph1)
        }
    }

    /// A shard-1 user's device API calls read and write nothing of shard 0's per-user
    /// tables (MariaDB's table statistics; retried, since other users' callbacks may
    /// touch shard 0 meanwhile, while a wrong route would touch it every time).
    func deviceAPIOfAShard1UserLeavesShard0Alone(_ user: RegisteredUser) throws {
        try admin.execute("SET GLOBAL userstat = 1")
        defer { _ = try? admin.execute("SET GLOBAL userstat = 0") }
        var untouched = false
        var changed: [String] = []
        Thread.sleep(forTimeInterval: 1)  // the sender's write-back of the last test's pushes
        for attempt in 0..<4 where !untouched {
            let before = try shard0Activity()
            let key = try api.call("/getpublickey", ["email": user.user.email])
            #expect(key.json["responseCode"] == "UserAlreadySubscribed", "\(key.bodyText)")
            let second = TestSecrets.apnsToken()
            let joined = try user.register(with: api, token: second)
            #expect(joined.json["responseCode"] == "UserUpdated", "\(joined.bodyText)")
            let status = try api.call("/getsubscriptionstatusv2", [
                "userid": user.user.userID, "subscriptionPayload": try user.user.sealJSON(["pushToken": second, "ignoreLastMessageDate": 1]),
            ])
            #expect(status.json["responseCode"] == "UserSubscribed", "\(status.bodyText)")
            let gone = try api.call("/unregister", ["userid": user.user.userID,
                                                    "token": try user.user.sealForDevice(["apnsToken": second], token: second,
                                                                                         for: "unregister.token")])
            #expect(gone.json["responseCode"] == "DeviceUnregistered", "\(gone.bodyText)")
            Thread.sleep(forTimeInterval: 1.5)  // the check-in flusher writes within a second
            let after = try shard0Activity()
            changed = Self.userTables.filter { (after[$0] ?? 0) != (before[$0] ?? 0) }
            untouched = changed.isEmpty
            if !untouched { print("ShardingTests: shard 0 busy in attempt \(attempt): \(changed)") }
        }
        #expect(untouched, "shard 0's per-user tables were touched: \(changed)")
        #expect(try records(user.user.userID) == (0, 1))
    }

    /// reap and renew reach shard 1's rows, and their pushes name it.
    func jobsRunOnEachShard(exchange1: RegisteredUser, graph1: GraphMailboxUser) throws {
        // A second device of the shard-1 user, silent for 31 days: reaped from shard 1.
        let stale = TestSecrets.apnsToken()
        #expect(try exchange1.register(with: api, token: stale).json["responseCode"] == "UserUpdated")
        #expect(try devices(exchange1.user.userID, on: shard1) == 2)
        try shard1.execute("""
            UPDATE Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row SET d.last_checkin_at = NOW(3) - INTERVAL 31 DAY
            WHERE s.userid = \(exchange1.user.userID) AND d.last_notified_at IS NULL
            """)
        let reaped = try cron(["reap"])
        #expect(reaped.contains("reap (shard 1): 1 stale devices"), "\(reaped)")
        #expect(try devices(exchange1.user.userID, on: shard1) == 1)

        // Its subscription falls silent: renew marks it on shard 1 and wakes its device.
        try shard1.execute("UPDATE EnsSubscriptionInfo SET last_callback_at = NOW(3) - INTERVAL 36 MINUTE WHERE userid = \(exchange1.user.userID)")
        let renewed = try cron(["renew"])
        #expect(renewed.contains("renew (shard 1): 1 subscriptions marked not subscribed, 1 wake-up pushes"), "\(renewed)")
        #expect(TestStack.eventually(within: 10) {
            APNsSimulator.accepted().contains { $0.token == exchange1.token && $0.pushType == "background" }
        })
        #expect(try count(shard1, """
            SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(exchange1.user.userID) AND d.last_wakeup_at IS NOT NULL AND s.registered = 0
            """) == 1)

        // The Graph keeper renews shard 1's subscriptions.
        try shard1.execute("""
            UPDATE EnsSubscriptionInfo
            SET renewed_at = NOW(3) - INTERVAL 1 DAY, renew_after = NOW(3)
            WHERE userid = \(graph1.user.userID)
            """)
        _ = try cron(["renew"])
        let live = try GraphSimulator.live(of: graph1.user.email)
        #expect(live.count == 1 && (live.first?["renewals"] as? NSNumber)?.intValue == 1, "\(live)")
    }
}
