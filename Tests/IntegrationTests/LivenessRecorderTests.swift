internal import ENSModel
import Codecs
import MariaDB
import OpenSSL
import Testing
@testable import ENSStore

/// Heartbeats in batches (`LivenessRecorder.callback`): one UPDATE writes each noted
/// record's last_callback_at and watermark, only at the noted generation, never moving a
/// record back past a callback it recorded itself (new mail, another host's later
/// heartbeat), and a batch that could not be written is kept for the next flush.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct LivenessRecorderTests {
    let database = TestStack.administratorConnection(database: "ens")

    /// A subscribed EWS record at `generation`, last heard from at `heardAt`.
    func record(generation: Int64 = 1, heardAt: String = "2026-11-29 10:00:00", watermark: String? = "w-start") throws -> Int64 {
        let userID = Hex.encode(try Digest.randomBytes(32))
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, generation, mail_backend, backend_url,
                endpoint, subscription_id, watermark, last_callback_at, heartbeat_minutes)
            VALUES (\(userID), 'pem', x'00', 1, \(generation), 'ews', 'https://mail.example.test/EWS/Exchange.asmx', 'https://mail.example.test:443',
                'sub', \(watermark), \(heardAt), 30)
            """)
        return try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(userID)")?.int(0))
    }

    func heard(_ id: Int64) throws -> (at: String, watermark: String?) {
        let row = try #require(try database.queryOne("SELECT last_callback_at, watermark FROM EnsSubscriptionInfo WHERE id = \(id)"))
        return (String(try row.text(0).prefix(23)), try row.optionalText(1))
    }

    func at(_ text: String) throws -> Timestamp {
        try #require(Timestamp(databaseString: text))
    }

    @Test func aBatchMovesEachRecordForwardAtItsGenerationOnly() throws {
        let plain = try record()
        let superseded = try record(generation: 2)
        let newer = try record(heardAt: "2026-11-29 12:00:00", watermark: "w-new-mail")
        let twice = try record()
        let ids = [plain, superseded, newer, twice]
        defer { _ = try? database.execute("DELETE FROM EnsSubscriptionInfo WHERE id IN (\(list: ids))") }

        let recorder = LivenessRecorder()
        recorder.callback(recordID: plain, generation: 1, watermark: "w-plain", at: try at("2026-11-29 11:00:00.250"))
        // The URL's generation is 1; the record moved on to 2: nothing changes.
        recorder.callback(recordID: superseded, generation: 1, watermark: "w-old", at: try at("2026-11-29 11:00:00"))
        // New mail recorded at 12:00 itself; a heartbeat noted at 11:00 must not undo it.
        recorder.callback(recordID: newer, generation: 1, watermark: "w-heartbeat", at: try at("2026-11-29 11:00:00"))
        // Two heartbeats in one batch: the later wins; one without a watermark keeps the other's.
        recorder.callback(recordID: twice, generation: 1, watermark: "w-first", at: try at("2026-11-29 11:00:00"))
        recorder.callback(recordID: twice, generation: 1, watermark: nil, at: try at("2026-11-29 11:00:30"))
        #expect(try heard(plain) == ("2026-11-29 10:00:00.000", "w-start"), "nothing is written before the flush")

        #expect(try recorder.flush(database: database) == 4)
        #expect(try heard(plain) == ("2026-11-29 11:00:00.250", "w-plain"))
        #expect(try heard(superseded) == ("2026-11-29 10:00:00.000", "w-start"))
        #expect(try heard(newer) == ("2026-11-29 12:00:00.000", "w-new-mail"))
        #expect(try heard(twice) == ("2026-11-29 11:00:30.000", "w-first"))
        #expect(try recorder.flush(database: database) == 0, "a flush takes what it wrote")
    }

    @Test func aBatchTheDatabaseRefusedIsWrittenByTheNextFlush() throws {
        let id = try record()
        defer { _ = try? database.execute("DELETE FROM EnsSubscriptionInfo WHERE id = \(id)") }
        let recorder = LivenessRecorder()
        recorder.callback(recordID: id, generation: 1, watermark: "w-1", at: try at("2026-11-29 11:00:00"))
        // A database that cannot be reached (a socket nothing listens on).
        let away = Connection(configuration: MariaDBConfiguration(unixSocket: "/nonexistent/mysqld.sock",
                                                                  user: "root", password: "", database: "ens"))
        #expect(throws: (any Error).self) { try recorder.flush(database: away) }
        #expect(try heard(id) == ("2026-11-29 10:00:00.000", "w-start"))
        // Meanwhile an older heartbeat arrives: the kept, newer note still wins.
        recorder.callback(recordID: id, generation: 1, watermark: "w-0", at: try at("2026-11-29 10:30:00"))
        #expect(try recorder.flush(database: database) == 1)
        #expect(try heard(id) == ("2026-11-29 11:00:00.000", "w-1"))
    }

    @Test func aLargeBatchIsWrittenInChunks() throws {
        let ids = try (0..<1_203).map { _ in try record() }
        defer { _ = try? database.execute("DELETE FROM EnsSubscriptionInfo WHERE id IN (\(list: ids))") }
        let recorder = LivenessRecorder()
        for (index, id) in ids.enumerated() {
            recorder.callback(recordID: id, generation: 1, watermark: "w-\(index)", at: try at("2026-11-29 11:00:00"))
        }
        #expect(try recorder.flush(database: database) == ids.count)
        let written = try database.query("""
            SELECT id, watermark FROM EnsSubscriptionInfo WHERE id IN (\(list: ids)) AND last_callback_at = '2026-11-29 11:00:00'
            """).map { (try $0.int(0), try $0.text(1)) }
        #expect(Dictionary(uniqueKeysWithValues: written) == Dictionary(uniqueKeysWithValues: ids.enumerated().map { ($1, "w-\($0)") }))
    }
}
