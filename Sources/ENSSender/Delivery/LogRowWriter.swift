internal import Codecs
internal import ENSModel
internal import ENSStore
internal import SenderWire

/// The NotificationLog rows the responders leave to the sender: every row without
/// content to fetch (`PushNotification.logRow`). Delivery notes a notification's row
/// when it takes the notification, and writes what it noted in one statement per shard
/// every quarter of a second (or every `maximumBatch` rows). At the capacity bench's
/// pace that is one commit for about 17 rows, where each callback's responder used to
/// commit its own; a `secure` device's row, whose content must be there when the push
/// arrives, is still written by the responder before the hand-off.
///
/// Nothing acknowledged is lost: a notification whose delivery ends before its row is
/// written stays in the spool until the batch that writes the row commits. If the
/// sender stops first (a crash, or a database that stays away), the spool replays the
/// notification at the next start: its row is written then (the same id, so once) and
/// the push goes again under its collapse id.
///
/// Used by the delivery thread only.
struct LogRowWriter {
    static let flushIntervalMilliseconds: Int64 = 250
    static let maximumBatch = 500

    /// Rows noted and not yet written, by the spool entry of their notification.
    private var unwritten: [SpoolEntry: (shard: Int?, row: NotificationLog.SealedRow)] = [:]
    /// Entries whose row this process wrote while their delivery goes on (a retry).
    private var written: Set<SpoolEntry> = []
    /// Entries whose delivery ended before their row was written: the spool forgets
    /// them once the row is.
    private var held: Set<SpoolEntry> = []
    private var lastFlush: Int64 = 0
    /// When a failure was last reported: a database that stays away fails every flush,
    /// four a second, and one line every 10 s says as much.
    private var failureReported: Int64?

    /// Notes `notification`'s row, unless it has none or it is noted or written already.
    mutating func note(_ entry: SpoolEntry, _ notification: PushNotification) {
        guard let logRow = notification.logRow, unwritten[entry] == nil, !written.contains(entry) else { return }
        // PushNotification(json:) refuses a `log` without `device` and an id that is not 32 hex characters.
        guard let device = notification.deviceRowID, let id = Hex.decode(notification.id) else {
            preconditionFailure("a parsed notification with a log row names its device and has a hex id")
        }
        let row = NotificationLog.SealedRow(id: id, deviceID: device, createdAt: Timestamp(millisecondsSinceEpoch: logRow.createdAtMilliseconds),
                                            summary: logRow.summarySealed)
        unwritten[entry] = (notification.shard, row)
    }

    /// The delivery of `entry` ended (delivered, dropped, expired): whether the spool
    /// may forget it now. If its row is not written yet, it is held until it is.
    mutating func finish(_ entry: SpoolEntry) -> Bool {
        written.remove(entry)
        guard unwritten[entry] != nil else { return true }
        held.insert(entry)
        return false
    }

    /// What a flush did: the held entries the spool may now forget, and the first
    /// shard's failure (its rows stay noted for the next flush) with the rows waiting,
    /// unless one was reported less than 10 s before.
    struct Flushed {
        var released: [SpoolEntry] = []
        var failure: (error: any Error, rowsWaiting: Int)?
    }

    /// Writes the noted rows once the interval has passed, the batch is full, or `force`
    /// (at shutdown): `write` writes one shard's rows (and drops those of a shard the
    /// map no longer has: they have nowhere to go).
    mutating func flush(nowMilliseconds: Int64, force: Bool = false,
                        write: (_ shard: Int, _ rows: [NotificationLog.SealedRow]) throws -> Void) -> Flushed {
        var flushed = Flushed()
        guard !unwritten.isEmpty,
              force || unwritten.count >= Self.maximumBatch || nowMilliseconds - lastFlush >= Self.flushIntervalMilliseconds else {
            return flushed
        }
        lastFlush = nowMilliseconds
        let byShard = Dictionary(grouping: unwritten, by: { $0.value.shard ?? 0 })
        var firstFailure: (any Error)?
        for (shard, rows) in byShard.sorted(by: { $0.key < $1.key }) {
            do {
                try write(shard, rows.map(\.value.row))
            } catch {
                if firstFailure == nil { firstFailure = error }
                continue
            }
            for (entry, _) in rows {
                unwritten[entry] = nil
                if held.remove(entry) != nil {
                    flushed.released.append(entry)
                } else {
                    written.insert(entry)
                }
            }
        }
        if let firstFailure, failureReported.map({ nowMilliseconds - $0 >= 10_000 }) ?? true {
            failureReported = nowMilliseconds
            flushed.failure = (firstFailure, unwritten.count)
        }
        return flushed
    }
}
