/// What waits in ens-sender's spool, counted from its files without opening a record
/// (`Spool.inspect`), as `ens-cron status` shows it.
public struct SpoolContents: Sendable, Equatable {
    public let pending: Int
    public let segments: Int
    /// When the oldest segment that still holds a pending notification was last
    /// written: its notifications have waited at least since then.
    public let oldestWrittenAt: Timestamp?

    public init(pending: Int, segments: Int, oldestWrittenAt: Timestamp?) {
        self.pending = pending
        self.segments = segments
        self.oldestWrittenAt = oldestWrittenAt
    }
}
