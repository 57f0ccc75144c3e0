public import POSIX



/// How the EWS backend reaches Exchange, registers mailboxes and bounds what callbacks push.
public struct ExchangeSettings: SettingsComponent {
    /// The public https URL of the callback location, ending in `/ews/`; registration
    /// needs it (callback URLs are this plus a sealed token).
    public var callbackURL = ""
    /// PEM CA bundle for Exchange servers; nil uses the system store.
    public var caFile: String?
    /// libcurl CONNECT_TO entries, comma-separated; for test setups only.
    public var connectTo: [String] = []
    /// StatusFrequency of new subscriptions (minutes, 1–1440). Exchange retries a
    /// failed callback for about this long, so an ENS outage shorter than roughly half
    /// of it costs no subscription; heartbeats also come this often, so a dead
    /// subscription is noticed after it plus subscription.grace_seconds.
    public var statusFrequency: Duration = .minutes(30)
    public var timeout: Duration = .milliseconds(10000)
    /// Budget for a callback's GetItem and GetFolder together; past it devices get a
    /// generic alert.
    public var itemTimeout: Duration = .milliseconds(5000)
    /// One wall-clock budget for a registration's Exchange work: every Autodiscover hop,
    /// the proof and the Subscribe attempts together.
    public var registrationBudget: Duration = .milliseconds(20000)
    /// Responder threads per process that may do a registration's Exchange work at
    /// once, and that a callback's lookups may hold for more than a second (a slow
    /// Exchange): the rest keep answering whatever Exchange does.
    public var maximumConcurrentRegistrations = 1
    public var maximumSlowCallbacks = 2
    /// Networks Exchange traffic may reach although they are special (loopback, private,
    /// link-local, ...); nothing by default.
    public var allowedNetworks: [IPNetwork] = []
    /// When set, the only Exchange host names (and their subdomains) ENS contacts; a
    /// listed host may also use a non-default port, and counts as the mailbox's
    /// Exchange for a forced re-registration.
    public var allowedHosts: [String] = []
    /// An HTTP proxy ("http://host:port") for all Exchange traffic (Autodiscover, EWS,
    /// OAuth token endpoints); nil: none, and the environment's http_proxy, https_proxy
    /// and all_proxy are ignored. The destination is still checked against
    /// allowed_networks and allowed_hosts; the proxy's own address is not.
    public var proxy: String?
    public var autodiscoverCacheLifetime: Duration = .hours(24)
    /// How long APNs should keep trying to deliver a new-mail notification.
    public var notificationTTL: Duration = .seconds(86400)
    /// Failed proofs of possession (credentials Exchange refused, or an EWS endpoint
    /// that is not the mailbox's) a record takes per window before registrations for it
    /// are answered 429 without contacting Exchange: ENS is no password-guessing oracle.
    public var proofFailureLimit = 5
    public var proofWindow: Duration = .seconds(900)
    /// A callback with more new items than this gets one "N new messages" alert per
    /// device (and no GetItem) instead of one alert per item.
    public var maximumItemsPerCallback = 50
    /// Pushes one record's callbacks may make per minute; past it a batch is
    /// summarized, and past that dropped (logged). Bounds what one mailbox can put in
    /// the shared spool.
    public var maximumNotificationsPerMinute = 120

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, ExchangeSettings> & Sendable = \.exchange

    public static let section = ConfigSection("Exchange (EWS push subscriptions; docs/exchange.md)", keys: [
        key("exchange.callback_url", \.callbackURL, .callbackURL(path: "/ews/", location: "the callback location"),
            example: .value("https://ens.example.com/ews/"),
            doc: "The public https URL under which Exchange reaches the callback location (nginx's /ews/), ending in /ews/.",
            details: """
            Callback URLs are this plus a sealed token, and Exchange refuses URLs of
            2,083 characters or more, so keep it short. Registration answers
            ExchangeError while it is unset.
            """),
        key("exchange.ca_file", \.caFile, .optional(.path),
            doc: "PEM CA bundle for Exchange servers (Autodiscover, EWS); empty uses the system store.",
            details: """
            Certificates are always verified.
            """),
        key("exchange.connect_to", \.connectTo, .list,
            doc: "libcurl CONNECT_TO entries, comma-separated (\"HOST:PORT:CONNECT-TO-HOST:PORT\"), to send Exchange host names elsewhere.",
            details: """
            For test setups (make run uses it to reach the Exchange simulator); leave
            empty in production.
            """),
        key("exchange.status_frequency_minutes", \.statusFrequency, .duration(1...1440, .minutes),
            doc: "StatusFrequency of new subscriptions, in minutes.",
            details: """
            Exchange sends a heartbeat this often when there is no mail, and retries a
            failed callback (30 s, 1, 2, 4 ... minutes apart) for about this long
            before it drops the subscription. 30 survives an ENS outage of about 15
            minutes; a dead subscription is noticed after 30 minutes plus
            subscription.grace_seconds. Smaller values notice sooner but make every
            restart longer than half of it a mass re-registration.
            """),
        key("exchange.timeout_ms", \.timeout, .duration(500...120_000, .milliseconds),
            doc: "Per-request limit for Autodiscover and Subscribe calls during /registerdevicev2."),
        key("exchange.item_timeout_ms", \.itemTimeout, .duration(100...60000, .milliseconds),
            doc: "Budget for GetItem (sender, subject) and GetFolder (badge) together during a callback.",
            details: """
            When Exchange is slower, devices get a generic "New mail" alert instead.
            """),
        key("exchange.registration_budget_ms", \.registrationBudget, .duration(1000...120_000, .milliseconds),
            doc: "One budget for all of a registration's Exchange work: every Autodiscover hop, the proof of possession and the Subscribe attempts " +
                 "together.",
            details: """
            Keep it well under nginx's fastcgi_read_timeout (60 s).
            """),
        key("exchange.max_concurrent_registrations", \.maximumConcurrentRegistrations, .integer(1...512),
            doc: "Responder threads per ens-fcgi process that may do a registration's Exchange work at once, and that callbacks' lookups may hold " +
                 "for more than a second (a slow Exchange).",
            details: """
            A request that finds the gate closed gets 503 at once (Exchange redelivers
            a callback), so slow Exchange servers never hold every thread: keep the
            sum below fcgi.threads. Fast callbacks are never turned away.
            """),
        key("exchange.max_slow_callbacks", \.maximumSlowCallbacks, .integer(1...512),
            doc: "Responder threads per ens-fcgi process that callbacks' lookups may hold for more than a second (a slow Exchange)."),
        key("exchange.allowed_networks", \.allowedNetworks, .networks,
            doc: "Where Exchange traffic may go (docs/security.md, \"Outbound requests\").",
            details: """
            Loopback, private, link-local (cloud metadata), multicast and other
            special addresses, in every IPv4 and IPv6 spelling, are refused unless
            listed here (CIDR, comma-separated; e.g. an on-premises Exchange at
            10.20.0.0/16). The check is on the address libcurl connects to, after DNS.
            """),
        key("exchange.allowed_hosts", \.allowedHosts, .hostNames("host names", example: "mail.example.com, example.org"),
            doc: "When set, the only Exchange host names ENS contacts (each entry matches itself and its subdomains).",
            details: """
            A listed host may use a port other than 443, and counts as the mailbox's
            own Exchange when a forced registration names it.
            """),
        key("exchange.proxy", \.proxy, .optional(.proxyURL),
            doc: "An HTTP proxy for all Exchange traffic (Autodiscover, EWS, OAuth token endpoints), as http://host:port (no user info).",
            details: """
            Empty: no proxy, and the environment's http_proxy, https_proxy and
            all_proxy are ignored. Through a proxy ENS still checks the destination:
            it resolves the host itself, refuses it under the two settings above, and
            has the proxy CONNECT to the address it checked. The proxy's own address
            is not checked.
            """),
        key("exchange.autodiscover_cache_hours", \.autodiscoverCacheLifetime, .duration(0...720, .hours),
            doc: "How long Autodiscover results are cached per email domain (0 = not cached)."),
        key("exchange.notification_ttl_seconds", \.notificationTTL, .duration(0...2_592_000, .seconds),
            doc: "apns-expiration of new-mail notifications: how long APNs (and ens-sender) keep trying."),
        key("exchange.proof_failure_limit", \.proofFailureLimit, .integer(1...1000), reload: .responders,
            doc: "Proof of possession (docs/security.md): a registration adds a device only after its credentials open the user's mailbox at its " +
                 "Exchange.",
            details: """
            After this many failed proofs for one user within the window (seconds)
            from one device, or from one client address (REMOTE_ADDR; an IPv6 /64),
            that device's or address's registrations for the user get 429 without
            contacting Exchange until the window ends; others are not held. A
            successful proof clears its device's count.
            """),
        key("exchange.proof_window_seconds", \.proofWindow, .duration(10...86400, .seconds), reload: .responders,
            doc: "The window, in seconds, in which exchange.proof_failure_limit failed proofs hold further registrations."),
        key("exchange.max_items_per_callback", \.maximumItemsPerCallback, .integer(1...1000), reload: .responders,
            doc: "Limits on what one mailbox's callbacks may push (docs/exchange.md, \"Limits\").",
            details: """
            A callback with more new items than max_items_per_callback gets one "N new
            messages" alert per device, without looking the items up. A record's
            pushes per minute are capped at max_notifications_per_minute: a batch that
            does not fit is summarized the same way, and past the cap it is answered
            OK to Exchange but not pushed (logged).
            """),
        key("exchange.max_notifications_per_minute", \.maximumNotificationsPerMinute, .integer(1...100_000), reload: .responders,
            doc: "Pushes one record's callbacks may make per minute; past it a batch is summarized, and past that dropped (logged)."),
    ])
}
