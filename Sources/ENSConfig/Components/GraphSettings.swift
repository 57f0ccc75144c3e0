public import ENSModel
internal import POSIX

/// How the Graph backend reaches Graph and the identity platform, and the tenants it serves.
public struct GraphSettings: SettingsComponent {
    /// The public https URL of the Graph notification location, ending in `/graph/`;
    /// empty: no Graph subscription can be made.
    public var callbackURL = ""
    public var url = "https://graph.microsoft.com"
    /// The Microsoft identity platform; a tenant's token endpoint is
    /// `<this>/<tenant id>/oauth2/v2.0/token`.
    public var loginURL = "https://login.microsoftonline.com"
    /// PEM CA bundle for Graph and the token endpoint; nil uses the system store.
    public var caFile: String?
    /// The lifetime asked for new and renewed subscriptions (Graph's cap for Outlook
    /// messages is 10,080 minutes today, 4,230 in older documents: 4,200 fits both).
    public var subscriptionLifetime: Duration = .minutes(4200)
    /// Budget for a notification's lookups (sender and subject, unread count): Graph
    /// wants its answer within 3 s, and the sender's hand-off comes after this.
    public var lookupBudget: Duration = .milliseconds(1500)
    public var timeout: Duration = .milliseconds(10000)
    /// Graph allows four requests in flight per mailbox; each responder process takes
    /// its share (this divided by fcgi.processes, at least one).
    public var maximumRequestsPerMailbox = 4
    /// Lock files that keep `maximumRequestsPerMailbox` across the host's processes.
    public var slotDirectory = "/run/ens/graph-slots"
    /// The tenants whose mailboxes ENS serves through Graph, by a name of the
    /// operator's choosing (`graph.tenant.<name>.<field>`).
    public var tenants: [String: GraphTenantSettings] = [:]

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, GraphSettings> & Sendable = \.graph

    public static let section = ConfigSection("Microsoft Graph (Exchange Online mailboxes; docs/graph.md)", keys: [
        key("graph.callback_url", \.callbackURL, .callbackURL(path: "/graph/", location: "the Graph notification location"),
            example: .value("https://ens.example.com/graph/"),
            doc: "The public https URL under which Graph reaches the notification location (nginx's /graph/), ending in /graph/.",
            details: """
            Notification URLs are this plus a routing token (record, generation, MAC;
            no credential). Graph registrations answer ExchangeError while unset.
            """),
        key("graph.url", \.url, .httpsURL,
            doc: "Graph's base URL (override only for tests or a national cloud)."),
        key("graph.login_url", \.loginURL, .httpsURL,
            doc: "The Microsoft identity platform's base URL; a tenant's token endpoint is <this>/<tenant id>/oauth2/v2.0/token."),
        key("graph.ca_file", \.caFile, .optional(.path),
            doc: "PEM CA bundle for Graph and the token endpoint; empty uses the system store."),
        key("graph.subscription_minutes", \.subscriptionLifetime, .duration(45...10080, .minutes),
            doc: "Lifetime asked for each subscription, in minutes.",
            details: """
            Graph's documented cap for Outlook messages is 10,080; older documents and
            some tenants say 4,230, so the default fits both. ens-cron renews at about
            half of it.
            """),
        key("graph.lookup_budget_ms", \.lookupBudget, .duration(100...2500, .milliseconds),
            doc: "Budget for a notification's lookups (sender and subject, unread count).",
            details: """
            Graph wants an answer within 3 s and retries slower ones; past the budget
            devices get a generic alert.
            """),
        key("graph.timeout_ms", \.timeout, .duration(500...60000, .milliseconds),
            doc: "Per-request limit for Graph and token-endpoint calls."),
        key("graph.max_requests_per_mailbox", \.maximumRequestsPerMailbox, .integer(1...4),
            doc: "Graph allows 4 requests in flight per mailbox and application.",
            details: """
            The responder processes of a host keep this limit together through lock
            files (flock) in graph.slot_dir, which every responder process must be
            able to create and lock files in (under mod_fcgid or CGI, the web server's
            user too). Lookups that find no room send a generic alert. Several ENS
            hosts each keep their own count.
            """),
        key("graph.slot_dir", \.slotDirectory, .path,
            doc: "Directory of the lock files that keep graph.max_requests_per_mailbox across a host's responder processes."),
    ], patterns: [
        tenantField("id", \.tenantID, .guid, doc: "The tenant id (a GUID) of an Entra tenant ENS serves through Graph.", details: """
            One block of graph.tenant.<name>.* keys per tenant, under a name of your choosing
            (lowercase letters, digits, - and _); a tenant needs all five. A registration whose
            mailbox domain is listed, with a Graph access token in its credentials, goes to
            Graph; every other one to EWS. ENS authenticates as its own application
            (client-credentials grant with a certificate; no secret, no user credential).
            """, example: "72f988bf-86f1-41af-91ab-2d7cd011db47"),
        tenantField("domains", \.domains, .hostNames("mail domains", example: "contoso.com, contoso.onmicrosoft.com"),
              doc: "The tenant's mail domains.", example: "contoso.com, contoso.onmicrosoft.com"),
        tenantField("client_id", \.clientID, .guid, doc: "ENS's application (client) id in that tenant.",
                    example: "0e5a1c2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"),
        tenantField("certificate_file", \.certificateFile, .path, doc: "The application's certificate (PEM), as uploaded to Entra.",
              example: "/etc/ens/secrets/graph-app.crt"),
        tenantField("key_file", \.keyFile, .path, doc: "Its RSA private key (PEM, 2048 bits or more; mode 0600, owner ens).",
              example: "/etc/ens/secrets/graph-app.key"),
    ])
}

/// One field of `graph.tenant.<name>.<field>`.
private func tenantField<Value>(
    _ field: String, _ property: any WritableKeyPath<GraphTenantSettings, Value> & Sendable, _ value: ConfigValue<Value>,
    doc: String, details: String = "", example: String
) -> ConfigPattern {
    GraphSettings.pattern("graph.tenant.", .tenant, field: field, value, doc: doc, details: details,
            examples: ["graph.tenant.contoso.\(field) = \(example)"]) { settings, name, parsed in
        settings.tenants[name, default: GraphTenantSettings(name: name)][keyPath: property] = parsed
    }
}

extension GraphSettings {
    /// The configured tenants, each complete; a tenant missing a field, or a domain
    /// claimed by two tenants, is a configuration error.
    public func completeTenants() throws(ConfigError) -> [GraphTenantSettings] {
        var owners: [String: String] = [:]
        return try tenants.keys.sorted().map { name throws(ConfigError) in
            let tenant = tenants[name]!
            for (field, missing) in [("id", tenant.tenantID.isEmpty), ("client_id", tenant.clientID.isEmpty), ("domains", tenant.domains.isEmpty),
                                     ("certificate_file", tenant.certificateFile.isEmpty), ("key_file", tenant.keyFile.isEmpty)] where missing {
                throw ConfigError(key: "graph.tenant.\(name).\(field)",
                                  problem: "is missing: a Graph tenant needs id, domains, client_id, certificate_file and key_file")
            }
            for domain in tenant.domains {
                if let other = owners[domain] {
                    throw ConfigError(key: "graph.tenant.\(name).domains", problem: "lists \(domain), which tenant \(other) lists too")
                }
                owners[domain] = name
            }
            return tenant
        }
    }
}
