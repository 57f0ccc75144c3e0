public import Logging
public import MariaDB

/// The cron jobs' work, each in bounded batches (never a whole table at once) and
/// idempotent: a second run with the same clock changes nothing.
public struct Maintenance {
    public struct Policy: Sendable {
        /// Devices that have not checked in for this many days are removed.
        public var deviceRetentionDays: Int
        /// Tokens APNs rejected are removed this many days after being disabled.
        public var disabledRetentionDays: Int
        /// A record without devices is removed this many days after its last activity
        /// (so a record fresh from /getpublickey is not removed before it registers).
        public var emptyRecordRetentionDays: Int
        /// Grace past a subscription's status frequency before it counts as dead.
        public var subscriptionGraceSeconds: Int
        /// At most one wake-up push per device per this many minutes.
        public var wakeupIntervalMinutes: Int

        public init(deviceRetentionDays: Int, disabledRetentionDays: Int, emptyRecordRetentionDays: Int,
                    subscriptionGraceSeconds: Int, wakeupIntervalMinutes: Int) {
            self.deviceRetentionDays = deviceRetentionDays
            self.disabledRetentionDays = disabledRetentionDays
            self.emptyRecordRetentionDays = emptyRecordRetentionDays
            self.subscriptionGraceSeconds = subscriptionGraceSeconds
            self.wakeupIntervalMinutes = wakeupIntervalMinutes
        }
    }

    public static let batchSize = 1000

    public let database: any SQLDatabase
    public let policy: Policy
    public let now: Timestamp
    public let logger: Logger

    public init(database: any SQLDatabase, policy: Policy, now: Timestamp, logger: Logger) {
        self.database = database
        self.policy = policy
        self.now = now
        self.logger = logger
    }

    private func daysAgo(_ days: Int) -> String {
        now.adding(seconds: -Int64(days) * 86400).databaseString
    }

    /// Runs `statement` (which must carry `LIMIT batchSize`) until it affects fewer rows.
    private func inBatches(_ statement: Query) throws -> Int {
        var total = 0
        while true {
            let affected = try database.execute(statement).affectedRows
            total += affected
            if affected < Self.batchSize { return total }
        }
    }

    // MARK: reap

    public struct ReapCounts: Sendable, Equatable {
        public var staleDevices = 0
        public var disabledDevices = 0
        public var emptyRecords = 0
        public var expiredURLCache = 0
    }

    public func reap() throws -> ReapCounts {
        var counts = ReapCounts()
        let limit = Self.batchSize
        counts.staleDevices = try inBatches("DELETE FROM Devices WHERE last_checkin_at < \(daysAgo(policy.deviceRetentionDays)) LIMIT \(limit)")
        counts.disabledDevices = try inBatches("DELETE FROM Devices WHERE disabled_at < \(daysAgo(policy.disabledRetentionDays)) LIMIT \(limit)")
        // Records with no devices: found by id in batches (a multi-table DELETE takes no LIMIT).
        let cutoff = daysAgo(policy.emptyRecordRetentionDays)
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
            if ids.count < limit { break }
        }
        counts.expiredURLCache = try inBatches("DELETE FROM EWSUrlCache WHERE expires_at < \(now.databaseString) LIMIT \(limit)")
        return counts
    }

    // MARK: sync-keys

    /// Expired sync keys are erased, sealed value and expiry both.
    public func purgeSyncKeys() throws -> Int {
        try inBatches("""
            UPDATE Devices SET sync_key_sealed = NULL, sync_key_expires_at = NULL
            WHERE sync_key_expires_at IS NOT NULL AND sync_key_expires_at <= \(now.databaseString) LIMIT \(Self.batchSize)
            """)
    }
}
