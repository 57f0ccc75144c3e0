public import ENSModel
internal import POSIX

extension Spool {
    /// How much waits in a spool, read from its files without opening any record (no
    /// key needed, nothing changed): for `ens-cron status`. A segment ens-sender is
    /// appending to meanwhile may be counted a record short.
    public static func inspect(directory: String) throws -> SpoolContents {
        let log = directory + "/log"
        guard Files.exists(log) else { return SpoolContents(pending: 0, segments: 0, oldestWrittenAt: nil) }
        var pending = 0
        var segments = 0
        var oldest: Timestamp?
        for (number, hasRecords) in try SpoolLayout.segmentNumbers(in: log) where hasRecords {
            let path = SpoolLayout.segmentPath(directory, number)
            let (offsets, _, _) = try SpoolLayout.scan(segment: path)
            let waiting = offsets.subtracting(try SpoolLayout.doneOffsets(SpoolLayout.donePath(directory, number))).count
            guard waiting > 0 else { continue }
            pending += waiting
            segments += 1
            if oldest == nil { oldest = lastWritten(path) }  // segments sort oldest first
        }
        return SpoolContents(pending: pending, segments: segments, oldestWrittenAt: oldest)
    }

    /// When the oldest segment holding a notification to deliver was last written (its
    /// notifications have waited at least since then); nil when nothing waits. From the
    /// open spool's own bookkeeping: one stat call, for the heartbeat every few seconds.
    public var oldestWaitingSince: Timestamp? {
        oldestLiveSegment.flatMap { Self.lastWritten(SpoolLayout.segmentPath(directory, $0)) }
    }

    private static func lastWritten(_ path: String) -> Timestamp? {
        Files.signature(path).map { Timestamp(millisecondsSinceEpoch: $0.modified / 1_000_000) }
    }
}
