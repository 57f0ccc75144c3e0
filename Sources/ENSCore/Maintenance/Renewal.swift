public import MariaDB
internal import OpenSSL
internal import Logging

extension Maintenance {
    public struct RenewCounts: Sendable, Equatable {
        public var deadSubscriptions = 0
        public var wakeups = 0
        public var wakeupsRefused = 0
    }

    /// Finds subscriptions whose Exchange heartbeats stopped (no callback within the
    /// status frequency plus grace), marks them not subscribed, and wakes each of their
    /// devices with one silent background push (priority 5, at most one per device per
    /// `wakeupIntervalMinutes`). The device then checks in, is told
    /// UserRecordPresentNotSubscribed, and registers again with fresh credentials — so no
    /// credentials need to be stored for this.
    public func renew(vault: Vault, sender: SenderClient) throws -> RenewCounts {
        var counts = RenewCounts()
        let nowText = now.databaseString
        var lastID: Int64 = 0
        while true {
            let rows = try database.query("""
                SELECT id, userid FROM EnsSubscriptionInfo
                WHERE id > \(lastID) AND registered = 1
                  AND (last_callback_at IS NULL
                       OR last_callback_at < \(nowText) - INTERVAL (status_frequency_minutes * 60 + \(policy.subscriptionGraceSeconds)) SECOND)
                ORDER BY id LIMIT \(Self.batchSize)
                """)
            for row in rows {
                let recordID = try row.int(0)
                lastID = recordID
                counts.deadSubscriptions += try database.execute("UPDATE EnsSubscriptionInfo SET registered = 0 WHERE id = \(recordID) AND registered = 1").affectedRows
            }
            if rows.count < Self.batchSize { break }
        }
        // Wake the devices of every record that is not subscribed, once per interval.
        let wakeCutoff = now.adding(seconds: -Int64(policy.wakeupIntervalMinutes) * 60).databaseString
        var lastDevice: Int64 = 0
        while true {
            let devices = try database.query("""
                SELECT d.id, d.token_sealed, d.bundle_id, d.development, s.userid
                FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
                WHERE d.id > \(lastDevice) AND s.registered = 0 AND d.disabled_at IS NULL
                  AND (d.last_wakeup_at IS NULL OR d.last_wakeup_at < \(wakeCutoff))
                ORDER BY d.id LIMIT \(Self.batchSize)
                """)
            for device in devices {
                let deviceID = try device.int(0)
                lastDevice = deviceID
                guard let token = try vault.openToken(try device.blob(1)) else { continue }
                var payload = JSONObjectWriter()
                var aps = JSONObjectWriter()
                aps.add("content-available", 1)
                payload.add("aps", rawJSON: aps.finished())
                var ens = JSONObjectWriter()
                ens.add("userid", try device.text(4))
                ens.add("action", "resubscribe")
                payload.add("ens", rawJSON: ens.finished())
                let notification = PushNotification(
                    id: Hex.encode(Array(Digest.sha256("wakeup:\(deviceID):\(now.millisecondsSinceEpoch / 60_000)").prefix(16))),
                    deviceToken: token, topic: try device.text(2), environment: try device.int(3) != 0 ? .sandbox : .production,
                    pushType: .background, expiration: now.millisecondsSinceEpoch / 1000 + 3600, payload: payload.finished(),
                    deviceRowID: deviceID
                )
                switch try sender.submit(notification) {
                case .accepted:
                    try database.execute("UPDATE Devices SET last_wakeup_at = \(nowText) WHERE id = \(deviceID)")
                    counts.wakeups += 1
                case .refused(let reason):
                    counts.wakeupsRefused += 1
                    logger.warning("sender refused a wake-up push", metadata: ["reason": "\(reason)"])
                }
            }
            if devices.count < Self.batchSize { break }
        }
        return counts
    }
}
