internal import Codecs
internal import OpenSSL
internal import Logging
internal import POSIX
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
        try maintenance.endLapsedHeartbeats(backend: backend)
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
    public func renew(vault: Vault, sender: SenderClient, privacyFloor: PrivacyMode,
                      keepers: [any SubscriptionKeeping] = [HeartbeatKeeper(backend: .ews)]) throws -> RenewCounts {
        var counts = RenewCounts()
        for keeper in keepers {
            counts.deadSubscriptions += try keeper.keep(self)
        }
        // Wake the devices of every record that is not subscribed, once per interval.
        let wakeCutoff = now.subtracting(policy.wakeupInterval)
        var lastDevice: Int64 = 0
        while true {
            let (devices, last) = try devicesToWake(after: lastDevice, notWokenSince: wakeCutoff, vault: vault)
            if let last { lastDevice = last }
            for device in devices {
                let token = device.token
                var payload = JSONObjectWriter()
                var aps = JSONObjectWriter()
                aps.add("content-available", 1)
                payload.add("aps", rawJSON: aps.finished())
                var ens = JSONObjectWriter()
                // As in mail pushes (MailPayload): only a `preview` device is named by
                // the address's hash; any other by its opaque tag, so Apple and Google
                // cannot tell whose mailbox lapsed.
                if device.privacy.raised(to: privacyFloor, hasPreviewKey: device.hasPreviewKey) == .preview {
                    ens.add("userid", device.userID)
                } else {
                    ens.add("tag", vault.pushTag(deviceID: device.deviceID))
                }
                ens.add("action", "resubscribe")
                payload.add("ens", rawJSON: ens.finished())
                let notification = PushNotification(
                    id: Hex.encode(Array(Digest.sha256("wakeup:\(device.deviceID):\(now.millisecondsSinceEpoch / 60_000)").prefix(16))),
                    deviceToken: token, topic: device.bundleID, environment: device.development ? .sandbox : .production,
                    pushType: .background, expiration: now.millisecondsSinceEpoch / 1000 + 3600, payload: payload.finished(),
                    deviceRowID: device.deviceID, shard: shard == 0 ? nil : shard
                )
                switch try sender.submit(notification) {
                case .accepted:
                    try recordWakeup(deviceID: device.deviceID)
                    counts.wakeups += 1
                case .refused(let reason):
                    counts.wakeupsRefused += 1
                    logger.warning("sender refused a wake-up push", metadata: ["reason": "\(reason)"])
                }
            }
            // Rows refused for their MAC leave a batch short: the end is an empty one.
            if last == nil { break }
        }
        return counts
    }
}
