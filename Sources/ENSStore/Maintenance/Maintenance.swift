public import Logging
public import MariaDB
public import ENSModel
public import ENSVault

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
        /// The notification log: entries older than this go (history.retention_hours),
        /// and beyond the newest `historyCount` per device once their content is gone.
        public var historyRetention: Duration
        public var historyCount: Int

        public init(deviceRetention: Duration, disabledRetention: Duration, emptyRecordRetention: Duration,
                    subscriptionGrace: Duration, wakeupInterval: Duration, historyRetention: Duration = .seconds(72 * 3600), historyCount: Int = 20) {
            self.deviceRetention = deviceRetention
            self.disabledRetention = disabledRetention
            self.emptyRecordRetention = emptyRecordRetention
            self.subscriptionGrace = subscriptionGrace
            self.wakeupInterval = wakeupInterval
            self.historyRetention = historyRetention
            self.historyCount = historyCount
        }
    }

    public static let batchSize = 1000
    /// Devices go in larger batches: InnoDB's work per statement adds up over a million
    /// stale devices (B5: 12.7–14.6 s with 1,000 rows a statement, 11.7 s with 5,000,
    /// 10.7–11.3 s with 10,000). A batch locks its rows for about 0.1 s: a check-in of
    /// one of them (it would be reaped anyway) waits that long at most.
    public static let deviceBatchSize = 10000

    public let database: any SQLDatabase
    /// Which shard `database` is: ens-cron runs the per-user jobs once per shard, and a
    /// push made here names its device's shard.
    public let shard: Int
    public let policy: Policy
    public let now: Timestamp
    public let logger: Logger
    /// Called after each batch of a long job with what it is doing and how many rows so
    /// far (ens-cron shows it on a terminal).
    public let progress: (@Sendable (_ what: String, _ rows: Int) -> Void)?

    public init(database: any SQLDatabase, shard: Int = 0, policy: Policy, now: Timestamp, logger: Logger,
                progress: (@Sendable (_ what: String, _ rows: Int) -> Void)? = nil) {
        self.database = database
        self.shard = shard
        self.policy = policy
        self.now = now
        self.logger = logger
        self.progress = progress
    }

    private func ago(_ duration: Duration) -> String {
        now.subtracting(duration).databaseString
    }

    /// Runs `statement` (which must carry `LIMIT limit`) until it affects fewer rows.
    private func inBatches(_ statement: Query, _ what: String, limit: Int = batchSize) throws(DatabaseError) -> Int {
        var total = 0
        while true {
            let affected = try database.execute(statement).affectedRows
            total += affected
            progress?(what, total)
            if affected < limit { return total }
        }
    }

    // MARK: reap

    public struct ReapCounts: Sendable, Equatable {
        public var staleDevices = 0
        public var disabledDevices = 0
        public var emptyRecords = 0
        public var expiredURLCache = 0
        public var forgottenEvents = 0
        public var expiredContent = 0
        public var oldNotifications = 0
        public var abandonedCredentials = 0
        public var expiredProofFailures = 0
        /// Single-use marks of sealed values whose window has closed.
        public var expiredSealedValues = 0
        /// Live subscriptions ended because the device that supplied their credentials
        /// was reaped (the credentials erased with it).
        public var subscriptionsEndedWithSupplier = 0
    }

    /// How long the new-mail events a backend delivered are remembered against
    /// redelivery: Graph retries a notification for up to four hours.
    public static let deliveredEventMemory: Duration = .seconds(6 * 3600)

    /// `binding` checks the suppliers of stored credentials (`CredentialErasure`).
    public func reap(binding: RowBinding) throws(DatabaseError) -> ReapCounts {
        var counts = ReapCounts()
        let devices = Self.deviceBatchSize
        let stale = try reapSuppliers(disabled: false, cutoff: ago(policy.deviceRetention), binding: binding)
        let disabled = try reapSuppliers(disabled: true, cutoff: ago(policy.disabledRetention), binding: binding)
        counts.subscriptionsEndedWithSupplier = stale.ended + disabled.ended
        counts.staleDevices = stale.devices
        counts.disabledDevices = disabled.devices
        counts.staleDevices += try inBatches("DELETE FROM Devices WHERE last_checkin_at < \(ago(policy.deviceRetention)) LIMIT \(devices)",
                                            "stale devices removed", limit: devices)
        counts.disabledDevices += try inBatches("DELETE FROM Devices WHERE disabled_at < \(ago(policy.disabledRetention)) LIMIT \(devices)",
                                               "rejected devices removed", limit: devices)
        let limit = Self.batchSize
        // Records with no devices: found by id in batches (a multi-table DELETE takes no LIMIT).
        let cutoff = ago(policy.emptyRecordRetention)
        var lastID: Int64 = 0
        while true {
            let rows = try database.query("""
                SELECT s.id FROM EnsSubscriptionInfo s LEFT JOIN Devices d ON d.subscription_row = s.id
                WHERE s.id > \(lastID) AND d.id IS NULL AND COALESCE(s.last_checkin_at, s.created_at) < \(cutoff)
                  AND NOT EXISTS (SELECT 1 FROM EnsSubscriptionInfo c WHERE c.claim_of = s.userid AND s.claim_of IS NULL)
                ORDER BY s.id LIMIT \(limit)
                """)
            let ids = try rows.map { row throws(DatabaseError) in try row.decode(Int64.self) }
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
        counts.expiredURLCache = try inBatches("DELETE FROM EWSUrlCache WHERE expires_at < \(now.databaseString) LIMIT \(limit)",
                                               "expired URL cache rows removed")
        // Failed-proof counts whose window ended (the longest window is a day).
        counts.expiredProofFailures = try inBatches("DELETE FROM ProofFailures WHERE window_started_at < \(ago(.seconds(86400))) LIMIT \(limit)",
                                                    "expired proof failure counts removed")
        counts.expiredProofFailures += try inBatches("DELETE FROM AccountFailures WHERE window_started_at < \(ago(.seconds(86400))) LIMIT \(limit)",
                                                     "expired account failure counts removed")
        // A sealed value past its window is refused by its time alone.
        counts.expiredSealedValues = try inBatches("DELETE FROM SealedValuesUsed WHERE expires_at < \(now.databaseString) LIMIT \(limit)",
                                                   "expired single-use marks removed")
        counts.forgottenEvents = try inBatches("DELETE FROM MailItemsSeen WHERE seen_at < \(ago(Self.deliveredEventMemory)) LIMIT \(limit)",
                                               "old Graph event ids forgotten")
        // Credentials stored for a registration attempt that never became the live
        // subscription (it failed, or its responder died between Subscribe and commit):
        // past the pending window nothing will use them. Few rows, so one statement (a
        // multi-table DELETE takes no LIMIT).
        counts.abandonedCredentials = try database.execute("""
            DELETE c FROM MailCredentials c JOIN EnsSubscriptionInfo s ON s.id = c.record_id
            WHERE c.generation <> s.generation
              AND c.created_at < \(ago(.seconds(3 * MailSubscriptionStore.CallbackRecord.pendingRegistrationSeconds)))
            """).affectedRows
        // Fresh credentials nothing will open any more: left for a generation that is not
        // the live one (it was superseded meanwhile).
        counts.abandonedCredentials += try database.execute("""
            DELETE f FROM MailCredentialsFresh f JOIN EnsSubscriptionInfo s ON s.id = f.record_id
            WHERE f.generation <> s.generation
              AND f.created_at < \(ago(.seconds(3 * MailSubscriptionStore.CallbackRecord.pendingRegistrationSeconds)))
            """).affectedRows
        // Fresh credentials whose device never became (or is no longer) one of the
        // record's: a registration that proved itself but was never recorded. Past the
        // pending window no callback will take them (`storedCredentials` skips them).
        counts.abandonedCredentials += try database.execute("""
            DELETE FROM MailCredentialsFresh
            WHERE supplied_by IS NOT NULL AND created_at < \(ago(.seconds(3 * MailSubscriptionStore.CallbackRecord.pendingRegistrationSeconds)))
              AND NOT EXISTS (SELECT 1 FROM Devices d
                              WHERE d.subscription_row = MailCredentialsFresh.record_id AND d.token_hash = MailCredentialsFresh.supplied_by)
            """).affectedRows
        // Live credentials whose supplier is gone without them (a device row deleted
        // outside ENS) or NULL (before migration 016, or a writer's edit): each record's
        // checked as a device leaving checks it (`CredentialErasure.orphansErased`).
        let settled = ago(.seconds(3 * MailSubscriptionStore.CallbackRecord.pendingRegistrationSeconds))
        for row in try database.query("""
            SELECT DISTINCT c.record_id FROM MailCredentials c
            WHERE c.created_at < \(settled) AND (c.supplied_by IS NULL OR c.supplier_mac IS NULL
              OR NOT EXISTS (SELECT 1 FROM Devices d WHERE d.subscription_row = c.record_id AND d.token_hash = c.supplied_by))
            LIMIT \(limit)
            """) {
            let recordID = try row.decode(Int64.self)
            let ended = try database.atomically { () throws(DatabaseError) in
                try CredentialErasure(database: database).orphansErased(recordID: recordID, binding: binding, now: now)
            }
            if ended { counts.subscriptionsEndedWithSupplier += 1 }
        }
        try reapNotificationLog(&counts)
        return counts
    }

    /// The stale (or long disabled) devices that supplied stored credentials, the live
    /// ones or fresh ones waiting: each removed with what it supplied in one transaction
    /// (`CredentialErasure.deviceLeft`), so a password or an OAuth grant never outlives
    /// the device that gave it. Few (at most one current supplier per subscription), found
    /// through the devices' own index; the batch DELETEs after take every other device.
    /// Each is re-checked under its row lock: one that checked in meanwhile stays.
    private func reapSuppliers(disabled: Bool, cutoff: String, binding: RowBinding) throws(DatabaseError) -> (devices: Int, ended: Int) {
        let supplies = """
            (EXISTS (SELECT 1 FROM MailCredentials c WHERE c.record_id = d.subscription_row AND c.supplied_by = d.token_hash) \
            OR EXISTS (SELECT 1 FROM MailCredentialsFresh f WHERE f.record_id = d.subscription_row AND f.supplied_by = d.token_hash))
            """
        let found: [Row]
        if disabled {
            found = try database.query("SELECT d.id FROM Devices d WHERE d.disabled_at < \(cutoff) AND \(unsafe: supplies)")
        } else {
            found = try database.query("SELECT d.id FROM Devices d WHERE d.last_checkin_at < \(cutoff) AND \(unsafe: supplies)")
        }
        var removed = (devices: 0, ended: 0)
        for id in try found.map({ row throws(DatabaseError) in try row.decode(Int64.self) }) {
            let (gone, ended) = try database.atomically { () throws(DatabaseError) -> (Bool, Bool) in
                let row: Row?
                if disabled {
                    row = try database.queryOne("""
                        SELECT subscription_row, token_hash FROM Devices WHERE id = \(id) AND disabled_at < \(cutoff) FOR UPDATE
                        """)
                } else {
                    row = try database.queryOne("""
                        SELECT subscription_row, token_hash FROM Devices WHERE id = \(id) AND last_checkin_at < \(cutoff) FOR UPDATE
                        """)
                }
                guard let row else { return (false, false) }
                let (recordID, tokenHash) = try row.decode(Int64.self, [UInt8].self)
                try database.execute("DELETE FROM Devices WHERE id = \(id)")
                return (true, try CredentialErasure(database: database).deviceLeft(recordID: recordID, tokenHash: tokenHash, binding: binding))
            }
            if gone { removed.devices += 1 }
            if ended { removed.ended += 1 }
        }
        if removed.devices > 0 {
            logger.info("devices that supplied stored credentials reaped with them", metadata: [
                "devices": "\(removed.devices)", "subscriptions.ended": "\(removed.ended)",
            ])
        }
        return removed
    }

    /// The notification log (rows of removed devices went with them): `secure` content
    /// past its expiry erased; entries past the retention removed; per device, entries
    /// beyond the newest history.count removed once their content is gone. The newest
    /// entry of a device always stays (until the retention): check-ins compare against it.
    private func reapNotificationLog(_ counts: inout ReapCounts) throws(DatabaseError) {
        let limit = Self.batchSize
        counts.expiredContent = try inBatches("""
            UPDATE NotificationLog SET content_sealed = NULL, content_expires_at = NULL
            WHERE content_expires_at <= \(now.databaseString) LIMIT \(limit)
            """, "expired secure notification content erased")
        counts.oldNotifications = try inBatches("""
            DELETE FROM NotificationLog WHERE created_at < \(ago(policy.historyRetention)) LIMIT \(limit)
            """, "notifications past the history retention removed")
        counts.oldNotifications += try database.execute("""
            DELETE NotificationLog FROM NotificationLog JOIN (
                SELECT id FROM (
                    SELECT id, content_sealed,
                           ROW_NUMBER() OVER (PARTITION BY device_id ORDER BY created_at DESC, id) AS newness
                    FROM NotificationLog
                ) ranked WHERE newness > \(max(policy.historyCount, 1)) AND content_sealed IS NULL
            ) beyond USING (id)
            """).affectedRows
        progress?("notifications beyond history.count removed", counts.oldNotifications)
    }

    // MARK: sync-keys

    /// Expired sync keys are erased, sealed value and expiry both.
    public func purgeSyncKeys() throws(DatabaseError) -> Int {
        try inBatches("""
            UPDATE Devices SET sync_key_sealed = NULL, sync_key_expires_at = NULL
            WHERE sync_key_expires_at IS NOT NULL AND sync_key_expires_at <= \(now.databaseString) LIMIT \(Self.batchSize)
            """, "expired sync keys erased")
    }
}
