

/// The SEG policy service a callback asks before pushing to a device with an EWS device id.
public struct PolicySettings: SettingsComponent {
    /// Empty: no policy service, every device may receive mail.
    public var url = ""
    public var caFile: String?
    public var timeout: Duration = .milliseconds(2000)
    /// Whether an unreachable policy service lets notifications through.
    public var allowOnError = false

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, PolicySettings> & Sendable = \.policy

    public static let section = ConfigSection("SEG policy service (secure email gateway)", keys: [
        key("policy.url", \.url, .emptyOr(.httpURL),
            doc: "Asked for every device registered with an ewsDeviceId before it gets a push: POST <url> {\"deviceId\": \"...\"} -> 200 " +
                 "{\"allowed\": true|false}.",
            details: """
            Empty: no policy service; every device may receive notifications.
            """),
        key("policy.ca_file", \.caFile, .optional(.path),
            doc: "PEM CA bundle for an https policy service; empty uses the system store."),
        key("policy.timeout_ms", \.timeout, .duration(100...30000, .milliseconds),
            doc: "How long to wait for the policy service, in milliseconds."),
        key("policy.on_error", \.allowOnError, .oneOf([("allow", true), ("deny", false)]),
            doc: "What an unreachable or malformed policy service means: deny (no push) or allow."),
    ])
}
