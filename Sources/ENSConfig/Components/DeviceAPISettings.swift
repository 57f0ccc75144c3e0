/// The device API's own limits: devices per record, new records per token, the
/// check-in grace, sealed values.
public struct DeviceAPISettings: SettingsComponent {
    /// Devices per user record: registering one more evicts the least recently active.
    public var maximumDevicesPerRecord = 20
    /// New user records one API token may create per hour (/getpublickey); the token
    /// ships in every install, so this bounds how fast anyone can fill the database.
    public var recordsPerTokenPerHour = 5000
    /// Time past a subscription's heartbeat interval before it counts as unhealthy
    /// (no heartbeat) and devices are told to register again.
    public var subscriptionGrace: Duration = .seconds(300)
    /// How far a sealed object's `sealedAt` may lie from the server's time (either way)
    /// before it is refused, and whether the original contract's unbound forms (no
    /// `purpose`, no `sealedAt`) are refused too (docs/api.md, "Sealed values").
    public var sealedMaximumAge: Duration = .seconds(900)
    public var sealedRequirePurpose = false

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, DeviceAPISettings> & Sendable = \.deviceAPI

    public static let section = ConfigSection("Device API (registrations and check-ins; docs/api.md)", keys: [
        key("devices.max_per_record", \.maximumDevicesPerRecord, .integer(1...1000), reload: .responders,
            doc: "Devices one user may have: registering one more removes the least recently active."),
        key("quota.records_per_token_per_hour", \.recordsPerTokenPerHour, .integer(1...10_000_000), reload: .responders,
            doc: "New user records one API token may create per hour (/getpublickey; the token ships in every install).",
            details: """
            Past it, new users get 429 until the hour is over. nginx also limits
            /getpublickey per client address (ens-site.conf).
            """),
        key("subscription.grace_seconds", \.subscriptionGrace, .duration(0...86400, .seconds),
            doc: "Grace period, in seconds, past a subscription's status frequency (the interval at which Exchange promises a callback) before the " +
                 "subscription counts as unhealthy.",
            details: """
            /getsubscriptionstatus then answers UserRecordPresentNotSubscribed and the
            device registers again. Raise it if slow Exchange servers cause needless
            re-registrations.
            """),
        key("sealed.max_age_seconds", \.sealedMaximumAge, .duration(30...86400, .seconds), reload: .responders,
            doc: "Sealed values (docs/api.md, \"Sealed values\"): a sealed object names its use (\"purpose\", e.g. \"updateprivacy.info\") and " +
                 "when it was sealed (\"sealedAt\", ms since the epoch), and is refused at any other endpoint or field and once its time is more " +
                 "than this many seconds from the server's, either way.",
            details: """
            Set require_purpose to true once every app sends them: the original
            contract's forms (no purpose, no time) are then refused as well. Both
            change with a reload.
            """),
        key("sealed.require_purpose", \.sealedRequirePurpose, .boolean, reload: .responders,
            doc: "Refuse the original contract's unbound sealed forms too (no purpose, no sealedAt)."),
    ])
}
