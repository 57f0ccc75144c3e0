public import POSIX

/// The Dovecot backend (docs/dovecot.md): where hosting admins' Dovecot servers reach
/// ENS, and how long an IMAP login may take. The servers themselves are registered in
/// the database (`ens-cron dovecot add`), not here.
public struct DovecotSettings: SettingsComponent {
    /// The public https URL of the push hook location, ending in `/dovecot/`; what
    /// `ens-cron dovecot config` writes into the servers' configuration.
    public var hookURL = ""
    /// One registration's IMAP work: the login that proves the password (Dovecot delays
    /// a failed one by 2 s, and more after repeated failures from one address) and the
    /// METADATA write.
    public var imapTimeout: Duration = .milliseconds(20000)
    /// Whether an address whose domain no server lists is looked for by the domain's
    /// own records (RFC 6186 SRV, then autoconfig), which may only lead to a registered
    /// server.
    public var discovery = true
    /// The nameservers the SRV lookups ask; empty: /etc/resolv.conf's.
    public var nameservers: [DNSResolver.Nameserver] = []

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, DovecotSettings> & Sendable = \.dovecot

    public static let section = ConfigSection("Dovecot (IMAP hosting; docs/dovecot.md)", keys: [
        key("dovecot.hook_url", \.hookURL, .callbackURL(path: "/dovecot/", location: "the Dovecot push hook location"),
            example: .value("https://ens.example.com/dovecot/"),
            doc: "The public https URL under which Dovecot servers reach the push hook (nginx's /dovecot/), ending in /dovecot/.",
            details: """
            `ens-cron dovecot config` writes it (plus v1, the hook's version), with the server's
            credential, into the
            configuration each hosting admin installs. Registrations of Dovecot mailboxes
            answer ExchangeError while it is unset.
            """),
        key("dovecot.imap_timeout_ms", \.imapTimeout, .duration(2000...120_000, .milliseconds),
            doc: "One registration's IMAP work (the login that proves the password, and the METADATA write), in milliseconds.",
            details: """
            Dovecot answers a wrong password after 2 s, and after more from one address
            later still (up to 15 s): keep it above that and under nginx's
            fastcgi_read_timeout (60 s).
            """),
        key("dovecot.discovery", \.discovery, .boolean,
            doc: "Whether a registration for a domain no server lists looks the domain's IMAP server up (RFC 6186 SRV, then autoconfig).",
            details: """
            What it finds counts only when it is a registered server (same host and port): a
            hosting admin's customer domains then need not be listed one by one. The autoconfig
            fetches follow Exchange's outbound policy (exchange.allowed_networks, allowed_hosts,
            proxy, ca_file). See docs/dovecot.md.
            """),
        key("dovecot.nameservers", \.nameservers, .nameservers,
            doc: "The nameservers discovery's SRV lookups ask (IP or IP:port, comma-separated); empty: those in /etc/resolv.conf.",
            details: "Set it to a validating resolver if the host's own does not validate DNSSEC."),
    ])
}
