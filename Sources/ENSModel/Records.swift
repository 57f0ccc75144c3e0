/// A user's row in EnsSubscriptionInfo.
public struct UserRecord: Sendable {
    public let id: Int64
    public let userID: String
    public let registered: Bool
    public let generation: Int64
    /// The backend of the record's subscription (or of its last one).
    public let backend: MailBackend
    public let subscriptionID: String?
    /// How often the backend promised a sign of life (EWS: StatusFrequency).
    public let heartbeatMinutes: Int64
    public let lastCallbackAt: Timestamp?
    /// The token endpoint refused the live subscription's refresh token: its
    /// notifications are generic until the device sends new credentials (check-ins
    /// tell it to register again).
    public let credentialsRefused: Bool
    /// The server the subscription is at (`Devices.endpoint`).
    public let endpoint: String?
    /// A claim (migration 024): a subscription of this user at a server some of its
    /// devices proved themselves at, beside the user's own record, while Autodiscover
    /// confirmed neither server. `userID` is the user's all the same.
    public let isClaim: Bool

    public init(id: Int64, userID: String, registered: Bool, generation: Int64, backend: MailBackend, subscriptionID: String?,
                heartbeatMinutes: Int64, lastCallbackAt: Timestamp?, endpoint: String? = nil, credentialsRefused: Bool = false,
                isClaim: Bool = false) {
        self.id = id
        self.userID = userID
        self.registered = registered
        self.generation = generation
        self.backend = backend
        self.subscriptionID = subscriptionID
        self.heartbeatMinutes = heartbeatMinutes
        self.lastCallbackAt = lastCallbackAt
        self.credentialsRefused = credentialsRefused
        self.endpoint = endpoint
        self.isClaim = isClaim
    }

    /// Whether a subscription for this record exists at its backend.
    public var isSubscribed: Bool { registered && subscriptionID != nil }

    /// Whether the backend is known to be pushing to us: subscribed, and a callback (or
    /// the subscription itself) within its heartbeat interval plus `grace`.
    public func subscriptionIsHealthy(now: Timestamp, grace: Duration) -> Bool {
        guard isSubscribed, let last = lastCallbackAt else { return false }
        return last.adding(seconds: heartbeatMinutes * 60).adding(grace) >= now
    }
}

/// A device's row in Devices. The push token itself is only in `token_sealed`.
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
    /// The device's own privacy mode, and its P-256 key (65 bytes) for `encrypted`.
    public let privacy: DevicePrivacy
    /// The server the device proved its credentials at (migration 013): it hears only
    /// callbacks of a subscription there, and its credentials go nowhere else.
    public let endpoint: String?
    /// The keyed hash of the device's secret (`Vault.deviceSecretHash`), if it registered one.
    public let secretHash: [UInt8]?

    /// Whether the device is bound to the record's live subscription's server.
    public func isBound(to record: UserRecord) -> Bool { endpoint != nil && endpoint == record.endpoint }
    public init(id: Int64, tokenHash: [UInt8], bundleID: String, defaultSound: String? = nil, ewsDeviceID: String? = nil, badge: Bool,
                development: Bool, disabledAt: Timestamp? = nil, lastNotifiedAt: Timestamp? = nil,
                privacy: DevicePrivacy, endpoint: String? = nil, secretHash: [UInt8]? = nil) {
        self.id = id
        self.tokenHash = tokenHash
        self.bundleID = bundleID
        self.defaultSound = defaultSound
        self.ewsDeviceID = ewsDeviceID
        self.badge = badge
        self.development = development
        self.disabledAt = disabledAt
        self.lastNotifiedAt = lastNotifiedAt
        self.privacy = privacy
        self.endpoint = endpoint
        self.secretHash = secretHash
    }
}

/// A device's choice of privacy mode (docs/privacy.md) with the key the mode needs:
/// for `encrypted` the key its previews are sealed to (the 65-byte uncompressed P-256
/// point); for `blind` the SHA-256 thumbprint of the certificate Graph encrypts to
/// (the certificate itself is its `GraphBlindSubscriptions` row's).
public struct DevicePrivacy: Sendable, Equatable {
    public let mode: PrivacyMode
    public let previewKey: [UInt8]?

    /// A `blind` device's certificate thumbprint.
    public var blindThumbprint: [UInt8]? { mode == .blind ? previewKey : nil }

    public static let preview = DevicePrivacy(mode: .preview, previewKey: nil)

    public init(mode: PrivacyMode, previewKey: [UInt8]?) {
        self.mode = mode
        self.previewKey = mode == .encrypted || mode == .blind ? previewKey : nil
    }
}

/// The settings a registration gives a device. Nil header flags mean "not sent": keep
/// what is stored (or 0 for a new device).
public struct DeviceSettings: Sendable, Equatable {
    public var bundleID: String
    public var defaultSound: String?
    public var ewsDeviceID: String?
    public var badge: Bool?
    public var development: Bool?
    /// Nil: keep what is stored (preview for a new device).
    public var privacy: DevicePrivacy?
    /// The keyed hash of a new device secret; nil keeps the stored one.
    public var secretHash: [UInt8]?

    public init(bundleID: String, defaultSound: String?, ewsDeviceID: String?, badge: Bool?, development: Bool?, privacy: DevicePrivacy? = nil,
                secretHash: [UInt8]? = nil) {
        self.secretHash = secretHash
        self.bundleID = bundleID
        self.defaultSound = defaultSound
        self.ewsDeviceID = ewsDeviceID
        self.badge = badge
        self.development = development
        self.privacy = privacy
    }
}
