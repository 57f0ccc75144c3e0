internal import POSIX
public import ENSModel
public import ENSVault
public import MariaDB

// The statements `ens-cron renew` runs: ending subscriptions whose heartbeats stopped,
// and finding the devices of unsubscribed records to wake (MailBackends' keepers and
// `Maintenance.renew` decide; these only read and write the rows).

extension Maintenance {
    /// Marks not subscribed, and erases the credentials of, every subscription of
    /// `backend` not heard from within its heartbeat plus the grace. Each lapse is
    /// re-checked under the row's lock in its own transaction, so a registration that has
    /// just made a new subscription live is not marked lapsed. Returns how many lapsed.
    public func endLapsedHeartbeats(backend: MailBackend) throws(DatabaseError) -> Int {
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
                """).map { row throws(DatabaseError) in try row.decode(Int64.self) }
            for recordID in ids {
                lapsed += try database.atomically { () throws(DatabaseError) in
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
        public let token: DeviceToken
        public let bundleID: String
        public let development: Bool
        public let userID: String
        /// The device's own privacy mode, and whether it has a preview key (for
        /// `PrivacyMode.raised`): what the push may say about the mailbox depends on it.
        public let privacy: PrivacyMode
        public let hasPreviewKey: Bool
    }

    /// The next batch of devices (ids above `lastDevice`) of unsubscribed records not
    /// woken since `cutoff`, enabled ones only. Read as every device is read
    /// (`SubscriptionStore.device(from:binding:)`): a row that fails its MAC, or whose
    /// sealed token is not its own, is left out (logged); `lastDevice` moves past it.
    public func devicesToWake(after lastDevice: Int64, notWokenSince cutoff: Timestamp,
                              vault: Vault) throws(DatabaseError) -> (candidates: [WakeupCandidate], lastID: Int64?) {
        let rows = try database.query("""
            SELECT \(unsafe: Self.wakeupColumns), d.token_sealed, s.userid
            FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE d.id > \(lastDevice) AND s.registered = 0 AND d.disabled_at IS NULL
              AND (d.last_wakeup_at IS NULL OR d.last_wakeup_at < \(cutoff.databaseString))
            ORDER BY d.id LIMIT \(Self.batchSize)
            """)
        let binding = RowBinding(vault: vault)
        let columns = SubscriptionStore.deviceColumnCount
        let candidates = try rows.compactMapTyped { row throws(DatabaseError) -> WakeupCandidate? in
            guard let device = try SubscriptionStore.device(from: Row(values: Array(row.values[..<columns])), binding: binding) else { return nil }
            let (tokenSealed, userID) = try Row(values: Array(row.values[columns...])).decode([UInt8].self, String.self)
            guard let token = try SubscriptionStore.token(sealed: tokenSealed, of: device, vault: vault) else { return nil }
            return WakeupCandidate(deviceID: device.id, token: token, bundleID: device.bundleID, development: device.development,
                                   userID: userID, privacy: device.privacy.mode, hasPreviewKey: device.privacy.previewKey != nil)
        }
        return (candidates, try rows.last.map { row throws(DatabaseError) in try row.int(0) })
    }

    private static let wakeupColumns = SubscriptionStore.deviceColumns(of: "d", epoch: "s.device_epoch")

    /// The wake-up push for `deviceID` was handed to the sender now.
    public func recordWakeup(deviceID: Int64) throws(DatabaseError) {
        try database.execute("UPDATE Devices SET last_wakeup_at = \(now.databaseString) WHERE id = \(deviceID)")
    }
}
