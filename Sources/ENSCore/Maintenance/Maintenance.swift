public import Logging
public import MariaDB

/// The cron jobs' work, each in bounded batches (never a whole table at once) and
/// idempotent: a second run with the same clock changes nothing.
public struct Maintenance {
    public struct Policy: Sendable {
        /// Devices that have not checked in for this long are removed.
        public var deviceRetention: Duration
        /// Tokens the push service rejected are removed this long after being disabled.
        public var disabledRetention: Duration
        /// A record without devices is removed this long after its last activity (so a
        /// record fresh from /getpublickey is not removed before it registers).
        public var emptyRecordRetention: Duration
        /// Grace past a subscription's heartbeat interval before it counts as dead.
        public var subscriptionGrace: Duration
        /// At most one wake-up push per device per this long.
        public var wakeupInterval: Duration

        public init(deviceRetention: Duration, disabledRetention: Duration, emptyRecordRetention: Duration,
                    subscriptionGrace: Duration, wakeupInterval: Duration) {
            self.deviceRetention = deviceRetention
            self.disabledRetention = disabledRetention
            self.emptyRecordRetention = emptyRecordRetention
            self.subscriptionGrace = subscriptionGrace
            self.wakeupInterval = wakeupInterval
        }
    }

    public static let batchSize = 1000

    public let database: any SQLDatabase
    public let policy: Policy
    public let now: Timestamp
    public let logger: Logger
    /// Called after each batch of a long job with what it is doing and how many rows so
    /// far (ens-cron shows it on a terminal).
    public let progress: (@Sendable (_ what: String, _ rows: Int) -> Void)?

    public init(database: any SQLDatabase, policy: Policy, now: Timestamp, logger: Logger,
                progress: (@Sendable (_ what: String, _ rows: Int) -> Void)? = nil) {
        self.database = database
        self.policy = policy
        self.now = now
        self.logger = logger
        self.progress = progress
    }

    private func ago(_ duration: Duration) -> String {
        now.subtracting(duration).databaseString
    }

    /// Runs `statement` (which must carry `LIMIT batchSize`) until it affects fewer rows.
    private func inBatches(_ statement: Query, _ what: String) throws -> Int {
        var total = 0
        while true {
            let affected = try database.execute(statement).affectedRows
            total += affected
            progress?(what, total)
            if affected < Self.batchSize { return total }
        }
    }

    // MARK: reap

    public struct ReapCounts: Sendable, Equatable {
        public var staleDevices = 0
        public var disabledDevices = 0
        public var emptyRecords = 0
        public var expiredURLCache = 0
        public var forgottenEvents = 0
    }

    /// How long the new-mail events a backend delivered are remembered against
    /// redelivery: Graph retries a notification for up to four hours.
    public static let deliveredEventMemory: Duration = .seconds(6 * 3600)

    public func reap() throws -> ReapCounts {
        var counts = ReapCounts()
        let limit = Self.batchSize
        counts.staleDevices = try inBatches("DELETE FROM Devices WHERE last_checkin_at < \(ago(policy.deviceRetention)) LIMIT \(limit)", "stale devices removed")
        counts.disabledDevices = try inBatches("DELETE FROM Devices WHERE disabled_at < \(ago(policy.disabledRetention)) LIMIT \(limit)", "rejected devices removed")
        // Records with no devices: found by id in batches (a multi-table DELETE takes no LIMIT).
        let cutoff = ago(policy.emptyRecordRetention)
        var lastID: Int64 = 0
        while true {
            let rows = try database.query("""
                SELECT s.id FROM EnsSubscriptionInfo s LEFT JOIN Devices d ON d.subscription_row = s.id
                WHERE s.id > \(lastID) AND d.id IS NULL AND COALESCE(s.last_checkin_at, s.created_at) < \(cutoff)
                ORDER BY s.id LIMIT \(limit)
                """)
            let ids = try rows.map { try $0.decode(Int64.self) }
            if let last = ids.last { lastID = last }
            if !ids.isEmpty {
                // Re-checked inside the DELETE: a device registered meanwhile keeps its record.
                counts.emptyRecords += try database.execute("""
                    DELETE FROM EnsSubscriptionInfo WHERE id IN (\(list: ids))
                    AND NOT EXISTS (SELECT 1 FROM Devices d WHERE d.subscription_row = EnsSubscriptionInfo.id)
                    """).affectedRows
            }
            progress?("empty records removed", counts.emptyRecords)
            if ids.count < limit { break }
        }
        counts.expiredURLCache = try inBatches("DELETE FROM EWSUrlCache WHERE expires_at < \(now.databaseString) LIMIT \(limit)", "expired URL cache rows removed")
        counts.forgottenEvents = try inBatches("DELETE FROM MailItemsSeen WHERE seen_at < \(ago(Self.deliveredEventMemory)) LIMIT \(limit)", "old Graph event ids forgotten")
        return counts
    }

    // MARK: sync-keys

    /// Expired sync keys are erased, sealed value and expiry both.
    public func purgeSyncKeys() throws -> Int {
        try inBatches("""
            UPDATE Devices SET sync_key_sealed = NULL, sync_key_expires_at = NULL
            WHERE sync_key_expires_at IS NOT NULL AND sync_key_expires_at <= \(now.databaseString) LIMIT \(Self.batchSize)
            """, "expired sync keys erased")
    }
}
