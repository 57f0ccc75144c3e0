import Foundation
import MariaDB
import Testing

/// A transaction whose connection is lost part-way is run again whole or fails whole:
/// never its later statements on a fresh autocommit connection after the server rolled
/// back the earlier ones. Against the stack's real MariaDB, the connection killed from a
/// second one as the failure.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct DatabaseTransactionTests {
    let database: Connection
    let killer: Connection

    init() throws {
        database = try TestStack.serviceConnection()
        killer = try TestStack.serviceConnection()
    }

    func cached(_ domain: String) throws -> Int64 {
        try killer.queryOne("SELECT COUNT(*) FROM EWSUrlCache WHERE domain = \(domain)")?.int(0) ?? -1
    }

    func insert(_ domain: String, on connection: Connection) throws {
        try connection.execute("""
            INSERT INTO EWSUrlCache (domain, ews_url, expires_at) VALUES (\(domain), 'https://x.test/EWS/Exchange.asmx', NOW() + INTERVAL 1 HOUR)
            """)
    }

    @Test func aConnectionLostMidTransactionRunsTheWholeTransactionAgain() throws {
        let first = "first-\(UUID().uuidString.prefix(8).lowercased()).test"
        let second = "second-\(UUID().uuidString.prefix(8).lowercased()).test"
        var runs = 0
        try database.transaction {
            runs += 1
            try insert(first, on: database)
            if runs == 1 {
                let id = try #require(try database.queryOne("SELECT CONNECTION_ID()")?.int(0))
                try killer.execute("KILL CONNECTION \(id)")
            }
            try insert(second, on: database)
        }
        #expect(runs == 2)
        #expect(try cached(first) == 1)
        #expect(try cached(second) == 1)
    }

    @Test func aTransactionThatKeepsLosingItsConnectionFailsWhole() throws {
        let first = "first-\(UUID().uuidString.prefix(8).lowercased()).test"
        let second = "second-\(UUID().uuidString.prefix(8).lowercased()).test"
        #expect(throws: MariaDBError.self) {
            try database.transaction {
                try insert(first, on: database)
                let id = try #require(try database.queryOne("SELECT CONNECTION_ID()")?.int(0))
                try killer.execute("KILL CONNECTION \(id)")
                try insert(second, on: database)
            }
        }
        #expect(try cached(first) == 0)
        #expect(try cached(second) == 0)
        // The connection recovers for the next caller.
        #expect(try database.queryOne("SELECT 1")?.int(0) == 1)
    }
}
