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
    ])
}
