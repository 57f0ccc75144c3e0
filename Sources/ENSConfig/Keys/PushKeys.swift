/// The migration note of the apns.* keys that became push.*.
private let renamedForProviders = "renamed in 2026-11, when the sender stopped being APNs-only: rename the key, the value and its meaning stay"

extension ConfigSection {
    static let push = ConfigSection("Push sender (ens-apns)", intro: """
        The push sender, ens-apns, delivers for every provider (APNs, FCM). The keys of this
        section were called apns.* before 2026-11 (see DEPRECATED KEYS in ens.conf(5)).
        """, keys: [
        ConfigKey("push.socket", \.pushSocket, .path, default: "/run/ens/apns.sock",
                  doc: "Unix socket on which ens-apns listens for notifications from the responders.",
                  details: """
                  ens-apns creates it with mode 0660.
                  """).formerly("apns.socket", renamedForProviders),
        ConfigKey("push.spool_dir", \.pushSpoolDirectory, .path, default: "/var/lib/ens/spool",
                  doc: "Where ens-apns keeps notifications between \"accepted\" and \"delivered\" (a log of sealed records under log/; sealed with a key derived from the master key).").formerly("apns.spool_dir", renamedForProviders),
        ConfigKey("push.spool_max", \.pushSpoolCapacity, .integer(1...10_000_000), default: "100000",
                  doc: "Most notifications the spool may hold; past it responders are told \"spool-full\".").formerly("apns.spool_max", renamedForProviders),
        ConfigKey("push.host_name", \.pushHostName, .optional(.senderHostName), default: "",
                  doc: "This host's name in the SenderHosts table, where ens-apns writes its spool depth every 5 s (1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-').",
                  details: """
                  `ens-cron status` on any host names a host whose heartbeat stopped while
                  its spool held notifications; drain that spool with `ens-apns drain`.
                  Empty: the system host name.
                  """),
        ConfigKey("push.max_in_flight", \.pushMaximumInFlight, .integer(1...10_000), default: "500",
                  doc: "Requests in flight at once, all providers together.").formerly("apns.max_in_flight", renamedForProviders),
        ConfigKey("push.connections", \.pushConnectionsPerHost, .integer(1...16), default: "2",
                  doc: "HTTP/2 connections per push-service host and credential.").formerly("apns.connections", renamedForProviders),
        ConfigKey("push.credential_pause_seconds", \.pushCredentialPause, .duration(1...3600, .seconds), default: "60",
                  doc: "When a push service refuses ENS's credential for an app (APNs 403 InvalidProviderToken, BadCertificate, ...; FCM 403), that app's notifications stay in the spool and wait this long before one is tried again (doubling, up to 15 minutes, while it is still refused).",
                  details: """
                  Fix the credential and restart ens-apns to resume at once.
                  """),
        ConfigKey("push.ca_file", \.pushCAFile, .optional(.path), default: "",
                  doc: "PEM CA bundle for the push services (APNs, FCM and FCM's token endpoint); empty uses the system store.").formerly("apns.ca_file", renamedForProviders),
    ])
}
