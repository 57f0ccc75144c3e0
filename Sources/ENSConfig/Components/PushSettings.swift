/// The migration note of the apns.* keys that became push.*.
private let renamedForProviders = "renamed in 2026-11, when the sender stopped being APNs-only: rename the key, the value and its meaning stay"

/// The push sender (ens-sender): its socket and spool, and how it talks to every provider.
public struct PushSettings: SettingsComponent {
    public var socket = "/run/ens/apns.sock"
    public var spoolDirectory = "/var/lib/ens/spool"
    public var spoolCapacity = 100_000
    /// This host's name in SenderHosts (push.host_name); nil: the system's (`senderHostName()`).
    public var hostName: String?
    public var maximumInFlight = 500
    public var connectionsPerHost = 2
    /// The first wait of an app's notifications after the push service refused its
    /// credential (doubling, up to 15 minutes, while it stays refused).
    public var credentialPause: Duration = .seconds(60)
    /// PEM CA bundle for the push services; nil uses the system store.
    public var caFile: String?

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, PushSettings> & Sendable = \.push

    public static let section = ConfigSection("Push sender (ens-sender)", intro: """
        The push sender, ens-sender, delivers for every provider (APNs, FCM). The keys of this
        section were called apns.* before 2026-11 (see DEPRECATED KEYS in ens.conf(5)).
        """, keys: [
        key("push.socket", \.socket, .path,
            doc: "Unix socket on which ens-sender listens for notifications from the responders.",
            details: """
            ens-sender creates it with mode 0660.
            """).formerly("apns.socket", renamedForProviders),
        key("push.spool_dir", \.spoolDirectory, .path,
            doc: "Where ens-sender keeps notifications between \"accepted\" and \"delivered\" (a log of sealed records under log/; sealed with a " +
                 "key derived from the master key).").formerly("apns.spool_dir", renamedForProviders),
        key("push.spool_max", \.spoolCapacity, .integer(1...10_000_000),
            doc: "Most notifications the spool may hold; past it responders are told \"spool-full\".")
            .formerly("apns.spool_max", renamedForProviders),
        key("push.host_name", \.hostName, .optional(.senderHostName),
            doc: "This host's name in the SenderHosts table, where ens-sender writes its spool depth every 5 s (1 to 64 characters of A-Z, a-z, " +
                 "0-9, '.', '_' and '-').",
            details: """
            `ens-cron status` on any host names a host whose heartbeat stopped while
            its spool held notifications; drain that spool with `ens-sender drain`.
            Empty: the system host name.
            """),
        key("push.max_in_flight", \.maximumInFlight, .integer(1...10_000),
            doc: "Requests in flight at once, all providers together.").formerly("apns.max_in_flight", renamedForProviders),
        key("push.connections", \.connectionsPerHost, .integer(1...16),
            doc: "HTTP/2 connections per push-service host and credential.").formerly("apns.connections", renamedForProviders),
        key("push.credential_pause_seconds", \.credentialPause, .duration(1...3600, .seconds),
            doc: "When a push service refuses ENS's credential for an app (APNs 403 InvalidProviderToken, BadCertificate, ...; FCM 403), that " +
                 "app's notifications stay in the spool and wait this long before one is tried again (doubling, up to 15 minutes, while it is " +
                 "still refused).",
            details: """
            Fix the credential and restart ens-sender to resume at once.
            """),
        key("push.ca_file", \.caFile, .optional(.path),
            doc: "PEM CA bundle for the push services (APNs, FCM and FCM's token endpoint); empty uses the system store.")
            .formerly("apns.ca_file", renamedForProviders),
    ])
}
