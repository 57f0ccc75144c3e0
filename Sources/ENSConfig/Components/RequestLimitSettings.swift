/// When the responders apply the request limits themselves (`limits.enforce`).
public enum RequestLimitsMode: Sendable, Equatable {
    /// Never: the web server limits (nginx's limit_req).
    case off
    /// For requests whose web server passes the variable ENS_LIMITS=1 (the shipped
    /// Apache site does; nginx's does not, as it limits by itself).
    case whenAsked
    /// For every request.
    case always
}


/// Request limits the responders apply themselves, for fronts that cannot (docs/deployment.md).
public struct RequestLimitSettings: SettingsComponent {
    public var mode = RequestLimitsMode.whenAsked
    public var tableFile = "/run/ens/limits.table"
    public var apiRate = 20
    public var apiBurst = 100
    public var recordsPerMinute = 30
    public var recordsBurst = 30
    public var callbackRate = 10
    public var callbackBurst = 100
    public var callbackHostRate = 1000
    public var callbackHostBurst = 5000
    public var graphRate = 20
    public var graphBurst = 200
    public var graphHostRate = 2000
    public var graphHostBurst = 10000

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, RequestLimitSettings> & Sendable = \.limits

    public static let section = ConfigSection("Request limits in the responders (for web servers that cannot apply them; docs/deployment.md)", keys: [
        key("limits.enforce", \.mode, .oneOf([("no", .off), ("asked", .whenAsked), ("yes", .always)]),
            doc: "When the responders apply nginx's per-address and per-URL limits themselves: no, asked (requests whose web server passes " +
                 "ENS_LIMITS=1) or yes.",
            details: """
            nginx applies them with limit_req (nginx/ens-site.conf) and does not ask.
            The shipped Apache site asks (SetEnv ENS_LIMITS 1) instead of running
            mod_security2 on every request. The pool's processes share one table in
            shared memory; CGI programs share limits.table_file. Counters are keyed
            by a keyed hash of the address or path, never the address itself; a
            refused request is answered before any database work (429, or 503 for
            Graph, as nginx does).
            """),
        key("limits.table_file", \.tableFile, .path,
            doc: "The file CGI programs share their counters in (the pool uses shared memory instead); about 3 MB, on a tmpfs.",
            details: """
            Created mode 0600 by the first request; removing it resets every counter.
            """),
        key("limits.api_per_second", \.apiRate, .integer(1...100_000_000),
            doc: "Device API requests per second per client address (nginx's ens_api zone)."),
        key("limits.api_burst", \.apiBurst, .integer(0...16000),
            doc: "Device API requests per client address allowed at once above that rate."),
        key("limits.records_per_minute", \.recordsPerMinute, .integer(1...100_000_000),
            doc: "/getpublickey (a new user record) per minute per client address (nginx's ens_records zone)."),
        key("limits.records_burst", \.recordsBurst, .integer(0...16000),
            doc: "/getpublickey requests per client address allowed at once above that rate."),
        key("limits.callback_per_second", \.callbackRate, .integer(1...100_000_000),
            doc: "Exchange callbacks per second per callback URL (nginx's ens_callbacks zone)."),
        key("limits.callback_burst", \.callbackBurst, .integer(0...16000),
            doc: "Exchange callbacks per callback URL allowed at once above that rate."),
        key("limits.callback_host_per_second", \.callbackHostRate, .integer(1...100_000_000),
            doc: "Exchange callbacks per second per client address (nginx's ens_callback_hosts zone)."),
        key("limits.callback_host_burst", \.callbackHostBurst, .integer(0...16000),
            doc: "Exchange callbacks per client address allowed at once above that rate."),
        key("limits.graph_per_second", \.graphRate, .integer(1...100_000_000),
            doc: "Graph notifications per second per notification URL (nginx's ens_graph zone)."),
        key("limits.graph_burst", \.graphBurst, .integer(0...16000),
            doc: "Graph notifications per notification URL allowed at once above that rate."),
        key("limits.graph_host_per_second", \.graphHostRate, .integer(1...100_000_000),
            doc: "Graph notifications per second per client address (nginx's ens_graph_hosts zone)."),
        key("limits.graph_host_burst", \.graphHostBurst, .integer(0...16000),
            doc: "Graph notifications per client address allowed at once above that rate."),
    ])
}
