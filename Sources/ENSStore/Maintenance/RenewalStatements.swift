internal import POSIX
public import ENSModel
internal import MariaDB

// The statements `ens-cron renew` runs: ending subscriptions whose heartbeats stopped,
// and finding the devices of unsubscribed records to wake (MailBackends' keepers and
// `Maintenance.renew` decide; these only read and write the rows).

extension Maintenance {
    /// Marks not subscribed, and erases the credentials of, every subscription of
    /// `backend` not heard from within its heartbeat plus the grace. Each lapse is
    /// re-checked under the row's lock in its own transaction, so a registration that has
    /// just made a new subscription live is not marked lapsed. Returns how many lapsed.
    public func endLapsedHeartbeats(backend: MailBackend) throws -> Int {
        let nowText = now.databaseString
        let grace = policy.subscriptionGrace.wholeSeconds
        let erasure = CredentialErasure(database: database)
        var lapsed = 0
        var lastID: Int64 = 0
        while true {
            let ids = try database.query("""
                SELECT id FROM EnsSubscriptionInfo
                WHERE id > \(lastID) AND registered = 1 AND mail_backend = \(backend)
                  AND (last_callback_at IS NULL
                       OR last_callback_at < \(nowText) - INTERVAL (heartbeat_minutes * 60 + \(grace)) SECOND)
                ORDER BY id LIMIT \(Self.batchSize)
                """).map { try $0.decode(Int64.self) }
            for recordID in ids {
                lapsed += try database.transaction {
                    guard let generation = try database.queryOne("""
                        SELECT generation FROM EnsSubscriptionInfo
                        WHERE id = \(recordID) AND registered = 1 AND mail_backend = \(backend)
                          AND (last_callback_at IS NULL
                               OR last_callback_at < \(nowText) - INTERVAL (heartbeat_minutes * 60 + \(grace)) SECOND)
                        FOR UPDATE
                        """)?.decode(Int64.self) else { return 0 }
                    try erasure.endSubscription(recordID: recordID, generation: generation)
                    return 1
                }
            }
            guard let last = ids.last, ids.count == Self.batchSize else { return lapsed }
            lastID = last
        }
    }

    /// A device of a record that is not subscribed, due a wake-up push.
    public struct WakeupCandidate: Sendable {
        public let deviceID: Int64
        public let tokenSealed: [UInt8]
        public let bundleID: String
        public let development: Bool
        public let userID: String
        /// The device's own privacy mode, and whether it has a preview key (for
        /// `PrivacyMode.raised`): what the push may say about the mailbox depends on it.
        public let privacy: PrivacyMode
        public let hasPreviewKey: Bool
    }

    /// The next batch of devices (ids above `lastDevice`) of unsubscribed records not
    /// woken since `cutoff`, enabled ones only.
    public func devicesToWake(after lastDevice: Int64, notWokenSince cutoff: Timestamp) throws -> [WakeupCandidate] {
        try database.query("""
            SELECT d.id, d.token_sealed, d.bundle_id, d.development, s.userid, d.privacy_mode, d.preview_key IS NOT NULL
            FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE d.id > \(lastDevice) AND s.registered = 0 AND d.disabled_at IS NULL
              AND (d.last_wakeup_at IS NULL OR d.last_wakeup_at < \(cutoff.databaseString))
            ORDER BY d.id LIMIT \(Self.batchSize)
            """).map { row in
            let (deviceID, tokenSealed, bundleID, development, userID, mode, hasKey) =
                try row.decode(Int64.self, [UInt8].self, String.self, Bool.self, String.self, Int.self, Bool.self)
            // A mode this build does not know (a newer host wrote it) is read as the
            // strictest, as SubscriptionStore reads it: the push then says less, not more.
            return WakeupCandidate(deviceID: deviceID, tokenSealed: tokenSealed, bundleID: bundleID, development: development,
                                   userID: userID, privacy: PrivacyMode(rawValue: mode) ?? .secure, hasPreviewKey: hasKey)
        }
    }

    /// The wake-up push for `deviceID` was handed to the sender now.
    public func recordWakeup(deviceID: Int64) throws {
        try database.execute("UPDATE Devices SET last_wakeup_at = \(now.databaseString) WHERE id = \(deviceID)")
    }
}
