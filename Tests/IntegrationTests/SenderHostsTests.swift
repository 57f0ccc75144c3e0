@testable import ENSModel
@testable import ENSStore
@testable import SenderWire
@testable import ENSSender
import Foundation
import MariaDB
import POSIX
import Testing

/// Several hosts, one database: each sender's heartbeat in SenderHosts,
/// `ens-cron status` and reap naming a host lost with a non-empty spool, and
/// `ens-sender drain` handing such a spool to this host's running sender.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct SenderHostsTests {
    let client = SenderClient(socketPath: TestStack.directory + "/run/apns.sock")
    static let binary = TestStack.root + "/.build/debug/"

    /// Runs an ENS executable with the test config; standard error joins the output.
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        try ChildProcess.run("/bin/sh", ["-c", "exec \"$0\" \"$@\" --config \"$ENS_TEST_VAR/ens.conf\" 2>&1", binary + executable] + arguments)
    }

    static func drain(_ arguments: String...) throws -> (status: Int32, output: String) {
        try run("ens-sender", ["drain"] + arguments)
    }

    static func scratchDirectory() throws -> String {
        let path = TestStack.directory + "/scratch-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A spool as a sender on another host leaves it, written by the real `Spool` with
    /// the shared master key, small segments so that it spans several.
    static func spool(at directory: String, _ notifications: [PushNotification]) throws {
        let spool = try Spool(directory: directory, masterKey: try TestStack.masterKey(), capacity: 1_000_000, segmentLimit: 256 * 1024)
        for chunk in stride(from: 0, to: notifications.count, by: 500) {
            var batch = Spool.Batch()
            for notification in notifications[chunk..<min(chunk + 500, notifications.count)] { try spool.write(notification, into: &batch) }
            try spool.commit(batch)
        }
    }

    static func segments(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory + "/log")) ?? []).filter { $0.hasSuffix(".seg") }.sorted()
    }

    /// How often the APNs simulator accepted each id.
    static func deliveries(of ids: Set<String>) -> [String: Int] {
        var counts: [String: Int] = [:]
        for record in APNsSimulator.accepted() { if let id = record.collapseID, ids.contains(id) { counts[id, default: 0] += 1 } }
        return counts
    }

    static func row(_ host: String, _ database: Connection) throws -> SenderHost? {
        try SenderHost.all(database: database).first { $0.host == host }
    }

    // MARK: Heartbeat

    @Test func theHeartbeatRowTracksTheSpool() throws {
        let host = ProcessInfoLite.hostName
        let database = try TestStack.serviceConnection()
        #expect(TestStack.eventually(within: 10) { (try? Self.row(host, database)).flatMap { $0 }.map { !$0.isSilent(now: .now()) } == true })
        // The row names the release this host's sender runs, and `ens-cron status` lists it.
        #expect(try Self.row(host, database)?.release == Release.version)
        let status = try Self.run("ens-cron", ["status"])
        #expect(status.output.contains("release \(Release.version)") && status.output.contains(host), "\(status.output)")
        // APNs away: what is accepted waits in the spool, and the row says so.
        try TestStack.stack("sim-stop")
        defer { _ = try? TestStack.stack("sim-start") }
        let waiting = (0..<5).map { _ in SenderTests.notification(token: TestSecrets.apnsToken()) }
        for notification in waiting { #expect(try client.submit(notification) == .accepted) }
        #expect(TestStack.eventually(within: 15) {
            guard let row = try? Self.row(host, database) else { return false }
            return row.spoolEntries >= 5 && row.oldestEntryAt != nil
        })
        try TestStack.stack("sim-start")
        #expect(TestStack.eventually(within: 30) {
            guard let row = try? Self.row(host, database) else { return false }
            return row.spoolEntries == 0 && row.oldestEntryAt == nil
        })
        #expect(Self.deliveries(of: Set(waiting.map(\.id))).count == waiting.count)
    }

    // MARK: Drain

    /// The whole story: this host's sender stops with notifications in its spool; the
    /// spool, copied away, is what a lost host leaves; the sender starts again with an
    /// empty spool, and the copy is drained into it. Each notification reaches APNs once.
    @Test func aStoppedSendersSpoolIsDrainedIntoTheRunningSender() throws {
        let database = try TestStack.serviceConnection()
        let lost = "lost-\(UUID().uuidString.prefix(8))"
        let copy = try Self.scratchDirectory()
        try TestStack.stack("sim-stop")
        let notifications = (0..<40).map { _ in SenderTests.notification(token: TestSecrets.apnsToken(), subject: "drained") }
        do {
            defer { _ = try? TestStack.stack("sender-start"); _ = try? TestStack.stack("sim-start") }
            for notification in notifications { #expect(try client.submit(notification) == .accepted) }
            try TestStack.stack("sender-stop")
            let spool = TestStack.directory + "/spool"
            try TestStack.run("/bin/cp", ["-a", spool + "/.", copy])
            // This host now stands for the one that takes over: its own spool starts empty.
            for name in try FileManager.default.contentsOfDirectory(atPath: spool + "/log") {
                try FileManager.default.removeItem(atPath: spool + "/log/" + name)
            }
        }
        #expect(!Self.segments(copy).isEmpty)
        // The lost host's row as it was left: a stale heartbeat and a full spool.
        try SenderHost(host: lost, spoolEntries: notifications.count, oldestEntryAt: .now(), heartbeatAt: Timestamp.now().subtracting(.seconds(600)))
            .write(database: database)
        defer { _ = try? database.execute("DELETE FROM SenderHosts WHERE host = \(lost)") }

        let (status, output) = try Self.drain("--from", copy, "--host", lost)
        #expect(status == 0, "\(output)")
        #expect(output.contains("drained \(copy): \(notifications.count) notifications handed to this host's sender"), "\(output)")
        #expect(output.contains("the spool is empty"))
        #expect(output.contains("removed \(lost) from SenderHosts"))
        #expect(Self.segments(copy).isEmpty)
        #expect(try Self.row(lost, database) == nil)
        let ids = Set(notifications.map(\.id))
        #expect(TestStack.eventually(within: 30) { Self.deliveries(of: ids).count == ids.count })
        Thread.sleep(forTimeInterval: 1)
        #expect(Self.deliveries(of: ids).values.allSatisfy { $0 == 1 }, "each exactly once")
    }

    /// Killed part-way and run again, the drain loses nothing (and what the first run
    /// handed over is not handed over again, beyond the batch in flight at the kill).
    @Test func anInterruptedDrainRunAgainLosesNothing() throws {
        let source = try Self.scratchDirectory()
        let notifications = (0..<20_000).map { _ in SenderTests.notification(token: TestSecrets.apnsToken(), pushType: .background) }
        try Self.spool(at: source, notifications)
        let before = Self.segments(source).count
        #expect(before > 5)
        let log = source + "/drain.out"
        let pid = try #require(Int32(try TestStack.run("/bin/sh",
                                                       ["-c", "\"$0\" drain --config \"$ENS_TEST_VAR/ens.conf\" --from \"$1\" >\"$2\" 2>&1 & echo $!",
                                                                    Self.binary + "ens-sender", source, log])))
        // Killed once it has marked something done, long before it is through.
        let marked = TestStack.eventually(within: 30) {
            ((try? FileManager.default.contentsOfDirectory(atPath: source + "/log")) ?? []).contains { $0.hasSuffix(".done") }
        }
        #expect(marked)
        kill(pid, SIGKILL)
        _ = TestStack.eventually(within: 10) { kill(pid, 0) != 0 }
        #expect(!((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("drained"), "interrupted before its end")
        #expect(!Self.segments(source).isEmpty)

        let (status, output) = try Self.drain("--from", source)
        #expect(status == 0, "\(output)")
        #expect(Self.segments(source).isEmpty)
        let ids = Set(notifications.map(\.id))
        let delivered = TestStack.eventually(within: 120) { Self.deliveries(of: ids).count == ids.count }
        #expect(delivered, "delivered \(Self.deliveries(of: ids).count) of \(ids.count)")
    }

    /// Garbage where a segment should be, and a record that does not open: each is
    /// reported and left, everything else is drained, and the sender stays up.
    @Test func damagedSegmentsAndRecordsAreReportedAndLeft() throws {
        let source = try Self.scratchDirectory()
        let good = (0..<3).map { _ in SenderTests.notification(token: TestSecrets.apnsToken(), pushType: .background) }
        try Self.spool(at: source, good)
        let more = (0..<2).map { _ in SenderTests.notification(token: TestSecrets.apnsToken(), pushType: .background) }
        try Self.spool(at: source, more)  // a second open: a second segment
        let second = try #require(Self.segments(source).last)
        // The last byte of that segment is its last record's tag: the record no longer opens.
        let handle = try #require(FileHandle(forUpdatingAtPath: source + "/log/" + second))
        let end = try handle.seekToEnd()
        try handle.seek(toOffset: end - 1)
        let last = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: end - 1)
        try handle.write(contentsOf: Data([last ^ 0xFF]))
        try handle.close()
        // And a segment that is no segment at all.
        try Data((0..<5000).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: source + "/log/0000000009.seg"))

        let (status, output) = try Self.drain("--from", source)
        #expect(status == 2, "\(output)")
        #expect(output.contains("segment 0000000009.seg: no readable record"), "\(output)")
        #expect(output.contains("segment \(second): 1 record(s) do not open"), "\(output)")
        #expect(output.contains("4 notifications handed to this host's sender, 0 expired, 1 unreadable, 0 refused, "
                                + "1 damaged segment(s); 2 segment file(s) left"), "\(output)")
        #expect(Self.segments(source) == [second, "0000000009.seg"])
        let ids = Set((good + more.dropLast()).map(\.id))
        #expect(TestStack.eventually(within: 30) { Self.deliveries(of: ids).count == ids.count })
        #expect(try client.submit(SenderTests.notification(token: TestSecrets.apnsToken())) == .accepted)

        // Not a spool at all: said so, nothing touched.
        let (notSpool, answer) = try Self.drain("--from", try Self.scratchDirectory())
        #expect(notSpool == 1)
        #expect(answer.contains("is not a spool directory"), "\(answer)")
    }

    @Test func thisHostsOwnSpoolIsNeverDrained() throws {
        let spool = TestStack.directory + "/spool"
        let link = try Self.scratchDirectory() + "/spool-link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: spool)
        for path in [spool, link, spool + "/../spool"] {
            let (status, output) = try Self.drain("--from", path)
            #expect(status == 1)
            #expect(output.contains("is this host's own spool"), "\(output)")
        }
        let host = ProcessInfoLite.hostName
        let (status, output) = try Self.drain("--from", try Self.scratchDirectory(), "--host", host)
        #expect(status == 1)
        #expect(output.contains("is this host"), "\(output)")
    }

    // MARK: Status

    @Test func statusAndReapNameAHostLostWithQueuedNotifications() throws {
        let database = try TestStack.serviceConnection()
        let lost = "stale-\(UUID().uuidString.prefix(8))"
        let idle = "idle-\(UUID().uuidString.prefix(8))"
        try SenderHost(host: lost, spoolEntries: 7, oldestEntryAt: Timestamp.now().subtracting(.seconds(900)),
                       heartbeatAt: .now()).write(database: database)
        // Stale with an empty spool: gone quiet, nothing lost.
        try SenderHost(host: idle, spoolEntries: 0, oldestEntryAt: nil,
                       heartbeatAt: Timestamp.now().subtracting(.seconds(600))).write(database: database)
        defer { _ = try? database.execute("DELETE FROM SenderHosts WHERE host IN (\(lost), \(idle))") }
        // Fresh: not flagged, whatever its spool holds.
        var text = try Self.run("ens-cron", ["status"]).output
        #expect(text.contains(lost) && !text.contains("\(lost): lost"), "\(text)")
        // The heartbeat set back, as a host that stopped writing ten minutes ago.
        let administrator = TestStack.administratorConnection(database: "ens")
        try administrator.execute("UPDATE SenderHosts SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 10 MINUTE WHERE host = \(lost)")
        text = try Self.run("ens-cron", ["status"]).output
        #expect(text.contains("\(lost): lost with 7 queued notifications: drain its spool with "
                              + "`ens-sender drain --from <copy of \(lost)'s push.spool_dir> --host \(lost)`"), "\(text)")
        #expect(!text.contains("\(idle): lost"))
        let json = try JSONSerialization.jsonObject(with: Data(try Self.run("ens-cron", ["status", "--json"]).output.utf8)) as? [String: Any]
        let hosts = try #require(json?["senderHosts"] as? [[String: Any]])
        let flagged = try #require(hosts.first { $0["host"] as? String == lost })
        #expect(flagged["lost"] as? Bool == true)
        #expect(flagged["spoolEntries"] as? Int == 7)
        #expect((flagged["heartbeatAgeSeconds"] as? Int ?? 0) >= 590)
        #expect((flagged["drainCommand"] as? String)?.contains("--host \(lost)") == true)
        #expect(hosts.first { $0["host"] as? String == idle }?["lost"] as? Bool == false)

        let reap = try Self.run("ens-cron", ["reap"]).output
        // One line per lost host (others' rows may be there too), none for the idle one.
        let warnings = reap.split(separator: "\n").filter { $0.contains("sender host lost with queued notifications") }
        #expect(warnings.filter { $0.contains("host=\(lost) ") }.count == 1, "\(reap)")
        #expect(warnings.first { $0.contains("host=\(lost) ") }?.contains("spool.entries=7") == true)
        #expect(!warnings.contains { $0.contains("host=\(idle)") })
    }
}
