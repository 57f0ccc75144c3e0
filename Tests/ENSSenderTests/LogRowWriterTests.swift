import ENSModel
import ENSStore
import ENSTestSupport
import SenderWire
import Testing
@testable import ENSSender

/// The sender's batches of NotificationLog rows: what is written when, and that the
/// spool forgets a notification only once its row is written.
@Suite struct LogRowWriterTests {
    struct WriteFailed: Error {}

    static func notification(_ number: Int, shard: Int? = nil, logged: Bool = true) throws -> PushNotification {
        let hex = String(number, radix: 16)
        let logRow = PushNotification.LogRow(createdAtMilliseconds: 1_800_000_000_000 + Int64(number),
                                             summarySealed: [UInt8(truncatingIfNeeded: number)])
        return PushNotification(
            id: String(repeating: "0", count: 32 - hex.count) + hex,
            deviceToken: try #require(DeviceToken(hex: String(repeating: "ab", count: 32))), topic: "com.example.mail",
            environment: .production, pushType: .alert, expiration: 1_900_000_000, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8),
            deviceRowID: Int64(100 + number), shard: shard, logRow: logged ? logRow : nil)
    }

    static func entry(_ number: Int) -> SpoolEntry { SpoolEntry(segment: 1, offset: UInt32(number)) }

    /// Runs a flush at `now` that records what it wrote, shard by shard.
    static func flush(_ writer: inout LogRowWriter, now: Int64, force: Bool = false, failing: Set<Int> = [],
                      wrote: inout [Int: [NotificationLog.SealedRow]]) -> LogRowWriter.Flushed {
        var written: [Int: [NotificationLog.SealedRow]] = [:]
        let flushed = writer.flush(nowMilliseconds: now, force: force) { shard, rows in
            if failing.contains(shard) { throw WriteFailed() }
            written[shard, default: []] += rows
        }
        wrote = written
        return flushed
    }

    @Test func rowsAreWrittenAQuarterSecondApartWithTheNotificationsIdDeviceAndTime() throws {
        var writer = LogRowWriter()
        var wrote: [Int: [NotificationLog.SealedRow]] = [:]
        writer.note(Self.entry(1), try Self.notification(1))
        writer.note(Self.entry(1), try Self.notification(1))  // taken again (a retry): noted once
        writer.note(Self.entry(2), try Self.notification(2, logged: false))  // the responder wrote its row
        _ = Self.flush(&writer, now: 1_000, wrote: &wrote)
        let first = try #require(wrote[0])
        #expect(first.count == 1)
        #expect(first[0].id == [UInt8](repeating: 0, count: 15) + [1] && first[0].deviceID == 101 && first[0].summary == [1])
        #expect(first[0].createdAt.millisecondsSinceEpoch == 1_800_000_000_001 && first[0].content == nil)
        writer.note(Self.entry(3), try Self.notification(3))
        _ = Self.flush(&writer, now: 1_100, wrote: &wrote)
        #expect(wrote.isEmpty, "within the interval nothing is written")
        _ = Self.flush(&writer, now: 1_100 + LogRowWriter.flushIntervalMilliseconds, wrote: &wrote)
        #expect(wrote[0]?.map(\.deviceID) == [103])
        writer.note(Self.entry(1), try Self.notification(1))
        _ = Self.flush(&writer, now: 9_000, force: true, wrote: &wrote)
        #expect(wrote.isEmpty, "a row written once is not written again while its delivery goes on")
    }

    @Test func aNotificationWhoseDeliveryEndsFirstStaysSpooledUntilItsRowIsWritten() throws {
        var writer = LogRowWriter()
        var wrote: [Int: [NotificationLog.SealedRow]] = [:]
        writer.note(Self.entry(1), try Self.notification(1))
        let forgotten1 = writer.finish(Self.entry(1))
        #expect(!forgotten1, "delivered before its row is written: held")
        let forgotten2 = writer.finish(Self.entry(2))
        #expect(forgotten2, "a notification without a row the sender writes goes at once")
        #expect(Self.flush(&writer, now: 1_000, failing: [0], wrote: &wrote).released.isEmpty, "a failed write releases nothing")
        let flushed = Self.flush(&writer, now: 2_000, wrote: &wrote)
        #expect(flushed.released == [Self.entry(1)] && flushed.failure == nil)
        #expect(wrote[0]?.count == 1, "the failed rows are written by the next flush")
        writer.note(Self.entry(4), try Self.notification(4))
        _ = Self.flush(&writer, now: 3_000, wrote: &wrote)
        let forgotten4 = writer.finish(Self.entry(4))
        #expect(forgotten4, "its row was written while it was being delivered")
    }

    @Test func eachShardIsWrittenOnItsOwnAndOnesFailureHoldsOnlyItsRows() throws {
        var writer = LogRowWriter()
        var wrote: [Int: [NotificationLog.SealedRow]] = [:]
        for number in 1...3 {
            writer.note(Self.entry(number), try Self.notification(number, shard: number == 3 ? 2 : nil))
            let forgotten = writer.finish(Self.entry(number))
            #expect(!forgotten)
        }
        let flushed = Self.flush(&writer, now: 1_000, failing: [2], wrote: &wrote)
        #expect(Set(flushed.released) == [Self.entry(1), Self.entry(2)] && flushed.failure?.error is WriteFailed)
        #expect(flushed.failure?.rowsWaiting == 1)
        #expect(wrote[0]?.count == 2 && wrote[2] == nil)
        let again = Self.flush(&writer, now: 1_000 + LogRowWriter.flushIntervalMilliseconds, failing: [2], wrote: &wrote)
        #expect(again.failure == nil, "a failure that goes on is reported once every 10 s")
        #expect(Self.flush(&writer, now: 11_000, failing: [2], wrote: &wrote).failure != nil)
        #expect(Self.flush(&writer, now: 12_000, wrote: &wrote).released == [Self.entry(3)])
        #expect(wrote[2]?.map(\.deviceID) == [103])
    }

    @Test func aFullBatchIsWrittenWithoutWaitingForTheInterval() throws {
        var writer = LogRowWriter()
        var wrote: [Int: [NotificationLog.SealedRow]] = [:]
        _ = Self.flush(&writer, now: 1_000, wrote: &wrote)
        for number in 1...LogRowWriter.maximumBatch { writer.note(Self.entry(number), try Self.notification(number)) }
        _ = Self.flush(&writer, now: 1_001, wrote: &wrote)
        #expect(wrote[0]?.count == LogRowWriter.maximumBatch)
    }
}
