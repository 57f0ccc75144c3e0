import Foundation
import MariaDB
import OpenSSL
import POSIX
import Testing
@testable import MailBackends
@testable import ENSStore
@testable import ENSVault

/// What several ENS hosts on one database (a Galera cluster) need of the database client
/// and of the cron jobs, against the stack's real MariaDB. Its second loopback address
/// (127.0.0.2) stands in for a second node, so that a test can see which "node" a
/// connection is on. The Galera-specific behaviour (a node cut off from the cluster,
/// certification conflicts between nodes) is exercised by scripts/cluster.sh against
/// three real Galera nodes.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct ClusterDatabaseTests {
    let port = (Int(TestStack.port) ?? 18443) + 20
    let password: String
    let admin = TestStack.administratorConnection()
    /// Port 1 on loopback: nothing listens there, so a connection is refused at once.
    static let nobody = 1

    init() throws {
        password = try String(contentsOfFile: TestStack.directory + "/secrets/db-service.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        // A DML-only account for the two loopback addresses, without TLS (these tests are
        // about which server is used; DatabaseTLSTests covers TLS).
        for host in ["127.0.0.1", "127.0.0.2"] {
            try admin.execute("CREATE USER IF NOT EXISTS 'ens_cluster_test'@'\(unsafe: host)' IDENTIFIED BY '\(unsafe: password)'")
            try admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ens.* TO 'ens_cluster_test'@'\(unsafe: host)'")
        }
    }

    func connection(_ servers: [(String, Int)]) -> Connection {
        Connection(configuration: MariaDBConfiguration(
            hosts: servers.map { MariaDBConfiguration.Endpoint(host: $0.0, port: $0.1) },
            user: "ens_cluster_test", password: password, database: "ens"))
    }

    func domain(_ label: String) -> String { "\(label)-\(UUID().uuidString.prefix(8).lowercased()).test" }

    func insert(_ domain: String, on database: any SQLDatabase) throws {
        try database.execute("""
            INSERT INTO EWSUrlCache (domain, ews_url, expires_at) VALUES (\(domain), 'https://x.test/EWS/Exchange.asmx', NOW() + INTERVAL 1 HOUR)
            """)
    }

    func cached(_ domain: String) throws -> Int64 {
        try admin.queryOne("SELECT COUNT(*) FROM ens.EWSUrlCache WHERE domain = \(domain)")?.int(0) ?? -1
    }

    func kill(_ database: Connection) throws {
        let id = try #require(try database.queryOne("SELECT CONNECTION_ID()")?.int(0))
        try admin.execute("KILL CONNECTION \(id)")
    }

    @Test func aServerThatCannotBeReachedIsPassedOver() throws {
        let database = connection([("127.0.0.1", Self.nobody), ("127.0.0.2", port)])
        #expect(try database.queryOne("SELECT COUNT(*) FROM APITokens")?.int(0) != nil)
        #expect(database.server?.description == "127.0.0.2:\(port)")
        #expect(!database.isGaleraNode)
        try database.checkHealth()
    }

    /// A server that goes away mid-transaction: the transaction runs again whole on the
    /// next server, and the connection stays there.
    @Test func aLostServerIsLeftForTheNextAndTheTransactionRunsAgainWhole() throws {
        let database = connection([("127.0.0.1", port), ("127.0.0.2", port)])
        try database.connect()
        #expect(database.server?.host == "127.0.0.1")
        let (first, second) = (domain("first"), domain("second"))
        var runs = 0
        try database.transaction {
            runs += 1
            try insert(first, on: database)
            if runs == 1 { try kill(database) }
            try insert(second, on: database)
        }
        #expect(runs == 2)
        #expect(try cached(first) == 1 && cached(second) == 1)
        #expect(database.server?.host == "127.0.0.2")
    }

    /// Every server down: the error says the database is unavailable (a 503 for a
    /// request) and carries neither password nor server message.
    @Test func whenNoServerAnswersTheFailureMeansUnavailable() throws {
        let database = connection([("127.0.0.1", Self.nobody), ("127.0.0.2", Self.nobody)])
        do {
            try database.connect()
            Issue.record("connected to nothing")
        } catch {
            #expect(error.kind == .connectionLost && error.meansUnavailable)
            #expect(!"\(error)".contains(password))
        }
        #expect(throws: MariaDBError.self) { try database.checkHealth() }
        #expect(!database.isConnected)
    }

    /// A lone statement chosen as a deadlock's victim (on Galera: one that lost
    /// certification to another node's write; both are 1213) was rolled back, so it runs
    /// again instead of failing the request. Here a transaction that has written more
    /// rows (so InnoDB picks the lone statement as the victim) and the statement lock
    /// two rows in opposite orders.
    @Test func aLoneStatementThatLosesADeadlockRunsAgain() throws {
        let (first, second) = ("a-" + domain("deadlock"), "b-" + domain("deadlock"))
        let holder = try TestStack.serviceConnection()
        try insert(first, on: holder)
        try insert(second, on: holder)
        try holder.execute("START TRANSACTION")
        for index in 0..<30 { try insert(domain("weight-\(index)"), on: holder) }
        try holder.execute("UPDATE EWSUrlCache SET ews_url = 'https://holder.test/EWS/Exchange.asmx' WHERE domain = \(second)")
        // Only this thread touches `holder` from here on: once the lone statement below
        // holds the first row and waits for the second, it asks for the first (the
        // deadlock), then commits.
        nonisolated(unsafe) let closing = holder
        let closer = Thread {
            Thread.sleep(forTimeInterval: 0.5)
            _ = try? closing.execute("UPDATE EWSUrlCache SET ews_url = 'https://holder.test/EWS/Exchange.asmx' WHERE domain = \(first)")
            Thread.sleep(forTimeInterval: 0.5)
            _ = try? closing.execute("COMMIT")
        }
        closer.start()
        let lone = try TestStack.serviceConnection()
        try lone.execute("""
            UPDATE EWSUrlCache SET ews_url = 'https://lone.test/EWS/Exchange.asmx' WHERE domain IN (\(first), \(second)) ORDER BY domain
            """)
        let urls = try admin.query("SELECT ews_url FROM ens.EWSUrlCache WHERE domain IN (\(first), \(second))").map { try $0.decode(String.self) }
        #expect(urls == ["https://lone.test/EWS/Exchange.asmx", "https://lone.test/EWS/Exchange.asmx"],
                "the rerun came after the transaction's commit")
        let deadlocks = try admin.queryOne("SHOW ENGINE INNODB STATUS").map { try $0.decode(String.self, String.self, String.self).2 } ?? ""
        #expect(deadlocks.contains("LATEST DETECTED DEADLOCK"))
    }

    /// Galera's SKIP LOCKED does not see another node's claim: two hosts can pick the same
    /// pooled key. The one whose DELETE finds the row gone takes another key; no key is
    /// handed out twice. Here the other node's claim is replayed between the SELECT and
    /// the DELETE.
    @Test func aPooledKeyClaimedElsewhereMeanwhileIsNotHandedOutTwice() throws {
        let thief = try TestStack.serviceConnection()
        let database = ClaimRacingDatabase(try TestStack.serviceConnection(), thief: thief)
        let pool = KeyPool(database: database, vault: Vault(masterKey: try TestStack.masterKey()))
        let taken = try #require(try pool.take())
        let stolen = try #require(database.stolenPublicKey)
        #expect(taken.publicKeyPEM != stolen)
        #expect(database.selects == 2, "the claim should have run again after losing the first key")
    }

    // MARK: The cron lease

    func leaseRow() throws -> (holder: String?, expired: Bool?) {
        let row = try admin.queryOne("SELECT holder, expires_at < NOW(3) FROM ens.CronLeases WHERE name = 'maintenance'")
        return try row?.decode(String?.self, Bool?.self) ?? (nil, nil)
    }

    /// Another host's lease: claimed by writing the row, as that host's ens-cron would.
    func holdLeaseElsewhere(expiresInSeconds seconds: Int) throws {
        try admin.execute("INSERT IGNORE INTO ens.CronLeases (name) VALUES ('maintenance')")
        try admin.execute("""
            UPDATE ens.CronLeases SET holder = 'other-host pid 4242', token = \(try Digest.randomBytes(16)),
                expires_at = NOW(3) + INTERVAL \(seconds) SECOND WHERE name = 'maintenance'
            """)
    }

    func freeLease() throws {
        try admin.execute("UPDATE ens.CronLeases SET holder = NULL, token = NULL, expires_at = NULL WHERE name = 'maintenance'")
    }

    @Test func theLeaseIsHeldByOneAtATimeAndExpiresWhenItsHolderStops() throws {
        try freeLease()
        defer { try? freeLease() }
        let one = try TestStack.serviceConnection()
        let two = try TestStack.serviceConnection()
        guard case .claimed(let first) = try CronLease.claim("maintenance", holder: "host-a pid 1", duration: .seconds(60), database: one) else {
            Issue.record("a free lease was not claimed")
            return
        }
        guard case .heldElsewhere(let held) = try CronLease.claim("maintenance", holder: "host-b pid 2", duration: .seconds(60), database: two) else {
            Issue.record("a held lease was claimed again")
            return
        }
        #expect(held.holder == "host-a pid 1" && held.expiresAt != nil)
        #expect(try first.renew(database: one))

        // host-a stalls past its expiry; host-b takes over, and host-a can neither
        // extend nor free host-b's lease.
        try admin.execute("UPDATE ens.CronLeases SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE name = 'maintenance'")
        guard case .claimed(let second) = try CronLease.claim("maintenance", holder: "host-b pid 2", duration: .seconds(60), database: two) else {
            Issue.record("an expired lease was not claimed")
            return
        }
        #expect(try !first.renew(database: one))
        try first.release(database: one)
        #expect(try leaseRow().holder == "host-b pid 2")
        try second.release(database: two)
        #expect(try leaseRow().holder == nil)
    }

    func cron(_ arguments: [String]) throws -> (output: String, log: String) {
        let logPath = TestStack.directory + "/log/ens-cron-cluster-test.log"
        try? FileManager.default.removeItem(atPath: logPath)
        let output = try TestStack.run("/bin/sh", ["-c", "exec \"$0\" \"$@\" 2>\"\(logPath)\"", TestStack.root + "/.build/debug/ens-cron"]
                                       + arguments + ["--config", TestStack.configPath])
        return (output, (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
    }

    /// Every host runs the same cron.d: a host whose run finds another host's lease
    /// skips the shared jobs (and says whose lease it is) but still refreshes its own
    /// token cache; once that lease expires (its holder crashed), the jobs run here and
    /// the lease is free again afterwards.
    @Test func cronOnAnotherHostSkipsTheSharedJobsUntilTheLeaseExpires() throws {
        defer { try? freeLease() }
        try holdLeaseElsewhere(expiresInSeconds: 300)
        let skipped = try cron(["all"])
        #expect(skipped.log.contains("api-keys done"), "this host's token cache is refreshed whoever holds the lease: \(skipped.log)")
        #expect(skipped.log.contains("another run holds the cluster's cron lease"), "\(skipped.log)")
        #expect(skipped.log.contains("other-host pid 4242"))
        #expect(!skipped.log.contains(#"msg="reap done""#) && !skipped.log.contains(#"msg="keys done""#), "\(skipped.log)")
        #expect(try leaseRow().holder == "other-host pid 4242")

        try admin.execute("UPDATE ens.CronLeases SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE name = 'maintenance'")
        let ran = try cron(["reap"])
        #expect(ran.log.contains("reap done"), "\(ran.log)")
        #expect(try leaseRow().holder == nil, "the lease should be released after the run")
    }
}

/// The client against a real Galera node (Tests/tools/galera-node.sh, a one-node
/// cluster on loopback) that then refuses every table with 1047 while it still answers
/// `SELECT 1`, as a node cut off from its cluster does, or leaves the Synced state. The
/// stack's plain MariaDB, at 127.0.0.2, is the next server in the list. (A real
/// partition, with its pause and 1180s, is scripts/cluster.sh's.)
@Suite(.serialized, .enabled(if: TestStack.isRunning && getuid() == 0 && FileManager.default.fileExists(atPath: "/usr/lib/galera/libgalera_smm.so"),
                             "needs root (the node runs as mysql), galera-4 and the stack"))
struct GaleraNodeTests {
    let stackPort = (Int(TestStack.port) ?? 18443) + 20
    let nodePort = (Int(TestStack.port) ?? 18443) + 30
    let directory = TestStack.directory + "/galera-node"
    let password: String
    static let script = TestStack.root + "/Tests/tools/galera-node.sh"

    init() throws {
        // ClusterDatabaseTests made the same account on the stack's MariaDB.
        _ = try ClusterDatabaseTests()
        password = try String(contentsOfFile: TestStack.directory + "/secrets/db-service.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try? TestStack.run(Self.script, ["stop", directory])
        _ = try TestStack.run(Self.script, ["start", directory, String(nodePort), String(nodePort + 1), password])
        // The table the tests read, on the node as on the stack.
        let admin = Connection(configuration: MariaDBConfiguration(unixSocket: directory + "/mysqld.sock",
                                                                   user: "root", password: "", database: "ens"))
        try admin.execute("CREATE TABLE IF NOT EXISTS APITokens (id INT PRIMARY KEY)")
    }

    func connection(_ servers: [(String, Int)]) -> Connection {
        Connection(configuration: MariaDBConfiguration(
            hosts: servers.map { MariaDBConfiguration.Endpoint(host: $0.0, port: $0.1) },
            user: "ens_cluster_test", password: password, database: "ens"))
    }

    func node(_ command: String) throws {
        _ = try TestStack.run(Self.script, [command, directory])
    }

    @Test func aNodeThatRefusesWorkIsLeftForTheNextServer() throws {
        defer { _ = try? TestStack.run(Self.script, ["stop", directory]) }
        let database = connection([("127.0.0.1", nodePort), ("127.0.0.2", stackPort)])
        #expect(try database.queryOne("SELECT COUNT(*) FROM APITokens")?.int(0) == 0)
        #expect(database.server?.port == nodePort && database.isGaleraNode)
        try database.checkHealth()

        try node("refuse")
        // The node refuses the statement (1047) without running it: it runs on the next.
        #expect(try database.queryOne("SELECT COUNT(*) FROM APITokens")?.int(0) != nil)
        #expect(database.server?.host == "127.0.0.2" && !database.isGaleraNode)

        // A transaction begun on the refusing node runs whole on the next server.
        let fresh = connection([("127.0.0.1", nodePort), ("127.0.0.2", stackPort)])
        let domain = "galera-\(UUID().uuidString.prefix(8).lowercased()).test"
        var runs = 0
        try fresh.transaction {
            runs += 1
            try fresh.execute("""
                INSERT INTO EWSUrlCache (domain, ews_url, expires_at) VALUES (\(domain), 'https://x.test/EWS/Exchange.asmx', NOW() + INTERVAL 1 HOUR)
                """)
        }
        #expect(fresh.server?.host == "127.0.0.2")
        #expect(try database.queryOne("SELECT COUNT(*) FROM EWSUrlCache WHERE domain = \(domain)")?.int(0) == 1)
        // The node refused START TRANSACTION itself, so the body ran once, on the next server.
        #expect(runs == 1)
    }

    /// What /alive reports: a node that is not a synced member of the Primary component
    /// is unusable even though it answers; with another server listed, the check moves
    /// there and passes.
    @Test func theHealthCheckReadsTheNodesWsrepState() throws {
        defer { _ = try? TestStack.run(Self.script, ["stop", directory]) }
        let alone = connection([("127.0.0.1", nodePort)])
        try alone.checkHealth()
        try node("desync")
        #expect(try alone.queryOne("SELECT COUNT(*) FROM APITokens")?.int(0) == 0)  // it still serves
        do {
            try alone.checkHealth()
            Issue.record("a desynced node passed the health check")
        } catch {
            #expect(error.kind == .nodeUnavailable && error.meansUnavailable)
            #expect("\(error)".contains("1047"))
        }
        let listed = connection([("127.0.0.1", nodePort), ("127.0.0.2", stackPort)])
        try listed.checkHealth()
        #expect(listed.server?.host == "127.0.0.2")
    }
}

/// A real connection whose first pick from the key pool is made, and claimed, by
/// another session first: what happens when a host on another Galera node claims the
/// same key between this one's SELECT and its DELETE (on one server, SKIP LOCKED would
/// have kept them apart).
private final class ClaimRacingDatabase: SQLDatabase {
    let inner: Connection
    let thief: Connection
    var selects = 0
    var stolenPublicKey: String?

    init(_ inner: Connection, thief: Connection) {
        self.inner = inner
        self.thief = thief
    }

    func query(_ query: Query) throws(MariaDBError) -> [Row] { try inner.query(query) }

    func queryOne(_ query: Query) throws(MariaDBError) -> Row? {
        guard query.sql.contains("FROM KeyPool") && query.sql.contains("SKIP LOCKED") else { return try inner.queryOne(query) }
        selects += 1
        guard selects == 1 else { return try inner.queryOne(query) }
        let row = try thief.queryOne(query)
        if let row {
            // The claim reads the sealed key alone (its public half is derived from it);
            // the stolen row's public half is read here to compare with.
            let id = try row.decode(Int64.self, [UInt8].self).0
            let publicKey = try thief.queryOne("SELECT public_key_pem FROM KeyPool WHERE id = \(id)")?.decode(String.self)
            try thief.execute("DELETE FROM KeyPool WHERE id = \(id)")
            stolenPublicKey = publicKey
        }
        return row
    }

    func execute(_ query: Query) throws(MariaDBError) -> ExecuteResult { try inner.execute(query) }

    func transaction<T>(_ body: () throws -> T) throws -> T { try inner.transaction(body) }
}
