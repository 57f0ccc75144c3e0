public import Codecs
public import MariaDB
public import OpenSSL
public import Logging
public import POSIX
public import ENSModel
public import ENSStore
public import ENSVault
public import SenderWire

/// How the cron job keeps one mail backend's subscriptions alive, or finds that they
/// are not. Each backend has one (`ens-cron renew` runs them all, then wakes the
/// devices of every record left unsubscribed).
public protocol SubscriptionKeeping: Sendable {
    var backend: MailBackend { get }
    /// Renews what this backend lets ENS renew and marks its subscriptions that are no
    /// longer alive `registered = 0`; returns how many it so marked.
    func keep(_ maintenance: Maintenance) throws -> Int
}

/// Subscriptions the server keeps alive for as long as ENS answers its callbacks, and
/// proves alive with a heartbeat every `heartbeat_minutes` (EWS push subscriptions and
/// their StatusFrequency). There is nothing to renew: one not heard from within its
/// heartbeat plus the grace has ended at the server.
public struct HeartbeatKeeper: SubscriptionKeeping {
    public let backend: MailBackend

    public init(backend: MailBackend) {
        self.backend = backend
    }

    /// A lapsed subscription's stored credentials are erased with the lapse, in one
    /// transaction: the devices are woken to register again, which brings fresh ones,
    /// and nothing should keep a password or an OAuth grant meanwhile. The lapse is
    /// re-checked under the row's lock, so a registration that has just made a new
    /// subscription live is not marked lapsed.
    public func keep(_ maintenance: Maintenance) throws -> Int {
        let database = maintenance.database
        let nowText = maintenance.now.databaseString
        let grace = maintenance.policy.subscriptionGrace.wholeSeconds
        let erasure = CredentialErasure(database: database)
        var lapsed = 0
        var lastID: Int64 = 0
        while true {
            let ids = try database.query("""
                SELECT id FROM EnsSubscriptionInfo
                WHERE id > \(lastID) AND registered = 1 AND mail_backend = \(backend)
                  AND (last_callback_at IS NULL
                       OR last_callback_at < \(nowText) - INTERVAL (heartbeat_minutes * 60 + \(grace)) SECOND)
                ORDER BY id LIMIT \(Maintenance.batchSize)
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
            guard let last = ids.last, ids.count == Maintenance.batchSize else { return lapsed }
            lastID = last
        }
    }
}

extension Maintenance {
    public struct RenewCounts: Sendable, Equatable {
        public var deadSubscriptions = 0
        public var wakeups = 0
        public var wakeupsRefused = 0
    }

    /// Each backend's keeper finds the subscriptions that ended (EWS: heartbeats that
    /// stopped) and marks them not subscribed; then each device of a record that is not
    /// subscribed gets one silent background push (priority 5, at most one per device
    /// per `wakeupInterval`). The device then checks in, is told
    /// UserRecordPresentNotSubscribed, and registers again with fresh credentials — so
    /// no credentials need to be stored for this.
    public func renew(vault: Vault, sender: SenderClient, keepers: [any SubscriptionKeeping] = [HeartbeatKeeper(backend: .ews)]) throws -> RenewCounts {
        var counts = RenewCounts()
        let nowText = now.databaseString
        for keeper in keepers {
            counts.deadSubscriptions += try keeper.keep(self)
        }
        // Wake the devices of every record that is not subscribed, once per interval.
        let wakeCutoff = now.subtracting(policy.wakeupInterval).databaseString
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
                let (deviceID, tokenSealed, bundleID, development, userID) = try device.decode(Int64.self, [UInt8].self, String.self, Bool.self, String.self)
                lastDevice = deviceID
                guard let token = try vault.openToken(tokenSealed) else { continue }
                var payload = JSONObjectWriter()
                var aps = JSONObjectWriter()
                aps.add("content-available", 1)
                payload.add("aps", rawJSON: aps.finished())
                var ens = JSONObjectWriter()
                ens.add("userid", userID)
                ens.add("action", "resubscribe")
                payload.add("ens", rawJSON: ens.finished())
                let notification = PushNotification(
                    id: Hex.encode(Array(Digest.sha256("wakeup:\(deviceID):\(now.millisecondsSinceEpoch / 60_000)").prefix(16))),
                    deviceToken: token, topic: bundleID, environment: development ? .sandbox : .production,
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
