internal import ENSModel
extension ConfigSection {
    static let graph = ConfigSection("Microsoft Graph (Exchange Online mailboxes; docs/graph.md)", keys: [
        ConfigKey("graph.callback_url", \.graphCallbackURL, .callbackURL(path: "/graph/", location: "the Graph notification location"), default: "", example: .value("https://ens.example.com/graph/"),
                  doc: "The public https URL under which Graph reaches the notification location (nginx's /graph/), ending in /graph/.",
                  details: """
                  Notification URLs are this plus a routing token (record, generation, MAC;
                  no credential). Graph registrations answer ExchangeError while unset.
                  """),
        ConfigKey("graph.url", \.graphURL, .httpsURL, default: "https://graph.microsoft.com",
                  doc: "Graph's base URL (override only for tests or a national cloud)."),
        ConfigKey("graph.login_url", \.graphLoginURL, .httpsURL, default: "https://login.microsoftonline.com",
                  doc: "The Microsoft identity platform's base URL; a tenant's token endpoint is <this>/<tenant id>/oauth2/v2.0/token."),
        ConfigKey("graph.ca_file", \.graphCAFile, .optional(.path), default: "",
                  doc: "PEM CA bundle for Graph and the token endpoint; empty uses the system store."),
        ConfigKey("graph.subscription_minutes", \.graphSubscriptionLifetime, .duration(45...10080, .minutes), default: "4200",
                  doc: "Lifetime asked for each subscription, in minutes.",
                  details: """
                  Graph's documented cap for Outlook messages is 10,080; older documents and
                  some tenants say 4,230, so the default fits both. ens-cron renews at about
                  half of it.
                  """),
        ConfigKey("graph.lookup_budget_ms", \.graphLookupBudget, .duration(100...2500, .milliseconds), default: "1500",
                  doc: "Budget for a notification's lookups (sender and subject, unread count).",
                  details: """
                  Graph wants an answer within 3 s and retries slower ones; past the budget
                  devices get a generic alert.
                  """),
        ConfigKey("graph.timeout_ms", \.graphTimeout, .duration(500...60000, .milliseconds), default: "10000",
                  doc: "Per-request limit for Graph and token-endpoint calls."),
        ConfigKey("graph.max_requests_per_mailbox", \.graphMaximumRequestsPerMailbox, .integer(1...4), default: "4",
                  doc: "Graph allows 4 requests in flight per mailbox and application.",
                  details: """
                  The responder processes of a host keep this limit together through lock
                  files (flock) in graph.slot_dir, which every responder process must be
                  able to create and lock files in (under mod_fcgid or CGI, the web server's
                  user too). Lookups that find no room send a generic alert. Several ENS
                  hosts each keep their own count.
                  """),
        ConfigKey("graph.slot_dir", \.graphSlotDirectory, .path, default: "/run/ens/graph-slots",
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
        tenantField("client_id", \.clientID, .guid, doc: "ENS's application (client) id in that tenant.", example: "0e5a1c2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"),
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
    ConfigPattern("graph.tenant.", .tenant, field: field, value, doc: doc, details: details,
                  examples: ["graph.tenant.contoso.\(field) = \(example)"]) { config, name, parsed in
        config.graphTenants[name, default: GraphTenantSettings(name: name)][keyPath: property] = parsed
    }
}
