/// A user's row in EnsSubscriptionInfo.
public struct UserRecord: Sendable {
    public let id: Int64
    public let userID: String
    public let registered: Bool
    public let generation: Int64
    public let ewsSubscriptionID: String?
    public let statusFrequencyMinutes: Int64
    public let lastCallbackAt: Timestamp?

    /// Whether Exchange is known to be pushing to us: registered, subscribed, and a
    /// callback (or the subscription itself) within its status frequency plus `grace`.
    public func subscriptionIsHealthy(now: Timestamp, graceSeconds: Int64) -> Bool {
        guard registered, ewsSubscriptionID != nil, let last = lastCallbackAt else { return false }
        return last.adding(seconds: statusFrequencyMinutes * 60 + graceSeconds) >= now
    }
}

/// A device's row in Devices. The APNs token itself is only in `tokenSealed`.
public struct DeviceRecord: Sendable, Equatable {
    public let id: Int64
    public let tokenHash: [UInt8]
    public let bundleID: String
    public let defaultSound: String?
    public let ewsDeviceID: String?
    public let badge: Bool
    public let development: Bool
    public let disabledAt: Timestamp?
    public let lastNotifiedAt: Timestamp?
}

/// The settings a registration gives a device. Nil header flags mean "not sent": keep
/// what is stored (or 0 for a new device).
public struct DeviceSettings: Sendable, Equatable {
    public var bundleID: String
    public var defaultSound: String?
    public var ewsDeviceID: String?
    public var badge: Bool?
    public var development: Bool?

    public init(bundleID: String, defaultSound: String?, ewsDeviceID: String?, badge: Bool?, development: Bool?) {
        self.bundleID = bundleID
        self.defaultSound = defaultSound
        self.ewsDeviceID = ewsDeviceID
        self.badge = badge
        self.development = development
    }
}
