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

extension ConfigSection {
    static let limits = ConfigSection("Request limits in the responders (for web servers that cannot apply them; docs/deployment.md)", keys: [
        ConfigKey("limits.enforce", \.limitsMode, .oneOf([("no", .off), ("asked", .whenAsked), ("yes", .always)]), default: "asked",
                  doc: "When the responders apply nginx's per-address and per-URL limits themselves: no, asked (requests whose web server passes ENS_LIMITS=1) or yes.",
                  details: """
                  nginx applies them with limit_req (nginx/ens-site.conf) and does not ask.
                  The shipped Apache site asks (SetEnv ENS_LIMITS 1) instead of running
                  mod_security2 on every request. The pool's processes share one table in
                  shared memory; CGI programs share limits.table_file. Counters are keyed
                  by a keyed hash of the address or path, never the address itself; a
                  refused request is answered before any database work (429, or 503 for
                  Graph, as nginx does).
                  """),
        ConfigKey("limits.table_file", \.limitsTableFile, .path, default: "/run/ens/limits.table",
                  doc: "The file CGI programs share their counters in (the pool uses shared memory instead); about 3 MB, on a tmpfs.",
                  details: """
                  Created mode 0600 by the first request; removing it resets every counter.
                  """),
        ConfigKey("limits.api_per_second", \.limitsAPIRate, .integer(1...100_000_000), default: "20",
                  doc: "Device API requests per second per client address (nginx's ens_api zone)."),
        ConfigKey("limits.api_burst", \.limitsAPIBurst, .integer(0...16000), default: "100",
                  doc: "Device API requests per client address allowed at once above that rate."),
        ConfigKey("limits.records_per_minute", \.limitsRecordsPerMinute, .integer(1...100_000_000), default: "30",
                  doc: "/getpublickey (a new user record) per minute per client address (nginx's ens_records zone)."),
        ConfigKey("limits.records_burst", \.limitsRecordsBurst, .integer(0...16000), default: "30",
                  doc: "/getpublickey requests per client address allowed at once above that rate."),
        ConfigKey("limits.callback_per_second", \.limitsCallbackRate, .integer(1...100_000_000), default: "10",
                  doc: "Exchange callbacks per second per callback URL (nginx's ens_callbacks zone)."),
        ConfigKey("limits.callback_burst", \.limitsCallbackBurst, .integer(0...16000), default: "100",
                  doc: "Exchange callbacks per callback URL allowed at once above that rate."),
        ConfigKey("limits.callback_host_per_second", \.limitsCallbackHostRate, .integer(1...100_000_000), default: "1000",
                  doc: "Exchange callbacks per second per client address (nginx's ens_callback_hosts zone)."),
        ConfigKey("limits.callback_host_burst", \.limitsCallbackHostBurst, .integer(0...16000), default: "5000",
                  doc: "Exchange callbacks per client address allowed at once above that rate."),
        ConfigKey("limits.graph_per_second", \.limitsGraphRate, .integer(1...100_000_000), default: "20",
                  doc: "Graph notifications per second per notification URL (nginx's ens_graph zone)."),
        ConfigKey("limits.graph_burst", \.limitsGraphBurst, .integer(0...16000), default: "200",
                  doc: "Graph notifications per notification URL allowed at once above that rate."),
        ConfigKey("limits.graph_host_per_second", \.limitsGraphHostRate, .integer(1...100_000_000), default: "2000",
                  doc: "Graph notifications per second per client address (nginx's ens_graph_hosts zone)."),
        ConfigKey("limits.graph_host_burst", \.limitsGraphHostBurst, .integer(0...16000), default: "10000",
                  doc: "Graph notifications per client address allowed at once above that rate."),
    ])
}
