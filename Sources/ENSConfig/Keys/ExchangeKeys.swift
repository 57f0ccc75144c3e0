extension ConfigSection {
    static let exchange = ConfigSection("Exchange (EWS push subscriptions; docs/exchange.md)", keys: [
        ConfigKey("exchange.callback_url", \.exchangeCallbackURL, .callbackURL(path: "/ews/", location: "the callback location"), default: "", example: .value("https://ens.example.com/ews/"),
                  doc: "The public https URL under which Exchange reaches the callback location (nginx's /ews/), ending in /ews/.",
                  details: """
                  Callback URLs are this plus a sealed token, and Exchange refuses URLs of
                  2,083 characters or more, so keep it short. Registration answers
                  ExchangeError while it is unset.
                  """),
        ConfigKey("exchange.ca_file", \.exchangeCAFile, .optional(.path), default: "",
                  doc: "PEM CA bundle for Exchange servers (Autodiscover, EWS); empty uses the system store.",
                  details: """
                  Certificates are always verified.
                  """),
        ConfigKey("exchange.connect_to", \.exchangeConnectTo, .list, default: "",
                  doc: "libcurl CONNECT_TO entries, comma-separated (\"HOST:PORT:CONNECT-TO-HOST:PORT\"), to send Exchange host names elsewhere.",
                  details: """
                  For test setups (make run uses it to reach the Exchange simulator); leave
                  empty in production.
                  """),
        ConfigKey("exchange.status_frequency_minutes", \.exchangeStatusFrequency, .duration(1...1440, .minutes), default: "30",
                  doc: "StatusFrequency of new subscriptions, in minutes.",
                  details: """
                  Exchange sends a heartbeat this often when there is no mail, and retries a
                  failed callback (30 s, 1, 2, 4 ... minutes apart) for about this long
                  before it drops the subscription. 30 survives an ENS outage of about 15
                  minutes; a dead subscription is noticed after 30 minutes plus
                  subscription.grace_seconds. Smaller values notice sooner but make every
                  restart longer than half of it a mass re-registration.
                  """),
        ConfigKey("exchange.timeout_ms", \.exchangeTimeout, .duration(500...120_000, .milliseconds), default: "10000",
                  doc: "Per-request limit for Autodiscover and Subscribe calls during /registerdevicev2."),
        ConfigKey("exchange.item_timeout_ms", \.exchangeItemTimeout, .duration(100...60000, .milliseconds), default: "5000",
                  doc: "Budget for GetItem (sender, subject) and GetFolder (badge) together during a callback.",
                  details: """
                  When Exchange is slower, devices get a generic "New mail" alert instead.
                  """),
        ConfigKey("exchange.registration_budget_ms", \.exchangeRegistrationBudget, .duration(1000...120_000, .milliseconds), default: "20000",
                  doc: "One budget for all of a registration's Exchange work: every Autodiscover hop, the proof of possession and the Subscribe attempts together.",
                  details: """
                  Keep it well under nginx's fastcgi_read_timeout (60 s).
                  """),
        ConfigKey("exchange.max_concurrent_registrations", \.exchangeMaximumConcurrentRegistrations, .integer(1...512), default: "1",
                  doc: "Responder threads per ens-fcgi process that may do a registration's Exchange work at once, and that callbacks' lookups may hold for more than a second (a slow Exchange).",
                  details: """
                  A request that finds the gate closed gets 503 at once (Exchange redelivers
                  a callback), so slow Exchange servers never hold every thread: keep the
                  sum below fcgi.threads. Fast callbacks are never turned away.
                  """),
        ConfigKey("exchange.max_slow_callbacks", \.exchangeMaximumSlowCallbacks, .integer(1...512), default: "2",
                  doc: "Responder threads per ens-fcgi process that callbacks' lookups may hold for more than a second (a slow Exchange)."),
        ConfigKey("exchange.allowed_networks", \.exchangeAllowedNetworks, .networks, default: "",
                  doc: "Where Exchange traffic may go (docs/security.md, \"Outbound requests\").",
                  details: """
                  Loopback, private, link-local (cloud metadata), multicast and other
                  special addresses, in every IPv4 and IPv6 spelling, are refused unless
                  listed here (CIDR, comma-separated; e.g. an on-premises Exchange at
                  10.20.0.0/16). The check is on the address libcurl connects to, after DNS.
                  """),
        ConfigKey("exchange.allowed_hosts", \.exchangeAllowedHosts, .hostNames("host names", example: "mail.example.com, example.org"), default: "",
                  doc: "When set, the only Exchange host names ENS contacts (each entry matches itself and its subdomains).",
                  details: """
                  A listed host may use a port other than 443, and counts as the mailbox's
                  own Exchange when a forced registration names it.
                  """),
        ConfigKey("exchange.proxy", \.exchangeProxy, .optional(.proxyURL), default: "",
                  doc: "An HTTP proxy for all Exchange traffic (Autodiscover, EWS, OAuth token endpoints), as http://host:port (no user info).",
                  details: """
                  Empty: no proxy, and the environment's http_proxy, https_proxy and
                  all_proxy are ignored. Through a proxy ENS still checks the destination:
                  it resolves the host itself, refuses it under the two settings above, and
                  has the proxy CONNECT to the address it checked. The proxy's own address
                  is not checked.
                  """),
        ConfigKey("exchange.autodiscover_cache_hours", \.exchangeAutodiscoverCacheLifetime, .duration(0...720, .hours), default: "24",
                  doc: "How long Autodiscover results are cached per email domain (0 = not cached)."),
        ConfigKey("exchange.notification_ttl_seconds", \.exchangeNotificationTTL, .duration(0...2_592_000, .seconds), default: "86400",
                  doc: "apns-expiration of new-mail notifications: how long APNs (and ens-apns) keep trying."),
        ConfigKey("exchange.proof_failure_limit", \.exchangeProofFailureLimit, .integer(1...1000), default: "5", reload: .responders,
                  doc: "Proof of possession (docs/security.md): a registration adds a device only after its credentials open the user's mailbox at its Exchange.",
                  details: """
                  After this many failed proofs for one user within the window (seconds)
                  from one device, or from one client address (REMOTE_ADDR; an IPv6 /64),
                  that device's or address's registrations for the user get 429 without
                  contacting Exchange until the window ends; others are not held. A
                  successful proof clears its device's count.
                  """),
        ConfigKey("exchange.proof_window_seconds", \.exchangeProofWindow, .duration(10...86400, .seconds), default: "900", reload: .responders,
                  doc: "The window, in seconds, in which exchange.proof_failure_limit failed proofs hold further registrations."),
        ConfigKey("exchange.max_items_per_callback", \.exchangeMaximumItemsPerCallback, .integer(1...1000), default: "50", reload: .responders,
                  doc: "Limits on what one mailbox's callbacks may push (docs/exchange.md, \"Limits\").",
                  details: """
                  A callback with more new items than max_items_per_callback gets one "N new
                  messages" alert per device, without looking the items up. A record's
                  pushes per minute are capped at max_notifications_per_minute: a batch that
                  does not fit is summarized the same way, and past the cap it is answered
                  OK to Exchange but not pushed (logged).
                  """),
        ConfigKey("exchange.max_notifications_per_minute", \.exchangeMaximumNotificationsPerMinute, .integer(1...100_000), default: "120", reload: .responders,
                  doc: "Pushes one record's callbacks may make per minute; past it a batch is summarized, and past that dropped (logged)."),
    ])
}
