internal import POSIX



/// Where each process writes its counters, and the token GET /metrics requires.
public struct MetricsSettings: SettingsComponent {
    /// Where each process writes its metrics for /metrics to add up (empty: off). A
    /// tmpfs such as /run is the right place: the files are rewritten every second.
    public var directory = "/run/ens/metrics"
    /// The file holding the bearer token GET /metrics requires (empty: /metrics answers
    /// 404 to everyone; there is no unauthenticated /metrics).
    public var tokenFile = ""

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, MetricsSettings> & Sendable = \.metrics

    public static let section = ConfigSection("Metrics", keys: [
        key("metrics.dir", \.directory, .emptyOr(.path),
            doc: "Each ENS process writes its counters here once a second; GET /metrics adds them up in the Prometheus text format, with the " +
                 "database gauges `ens-cron gauges` counted last (once a minute, in `ens-cron all`).",
            details: """
            Empty: off.
            """),
        key("metrics.token_file", \.tokenFile, .emptyOr(.path),
            doc: "GET /metrics answers only a request with `Authorization: Bearer <token>`, the token this file holds (at least 32 printable " +
                 "characters; `openssl rand -hex 32 > /etc/ens/secrets/metrics.token`, mode 0640 root:ens), compared in constant time; anything " +
                 "else gets 401.",
            details: """
            Give Prometheus the same file (`authorization: credentials_file:`). Empty:
            /metrics answers 404 to everyone. nginx and Apache also keep /metrics to
            loopback. Read at start: restart ens-fcgi after changing it.
            """),
    ])
}

extension MetricsSettings {
    /// This process's metrics file (nil when metrics are off), the directory created
    /// if missing.
    public func file(_ name: String) -> String? {
        guard !directory.isEmpty else { return nil }
        if !Files.exists(directory) {
            // Best effort: a directory that cannot be made shows as a write error of the
            // recorder, which logs it.
            try? Files.createDirectory(directory, mode: 0o750)
        }
        return directory + "/" + name + ".prom"
    }

    /// The bearer token GET /metrics requires, read from `metrics.token_file`; nil when
    /// none is configured (then /metrics is off). At least 32 characters: a scraper's
    /// token is typed by no one, and a short one could be guessed.
    public func token() throws(ConfigError) -> String? {
        guard !tokenFile.isEmpty else { return nil }
        let token = try ENSConfiguration.secretText(key: "metrics.token_file", path: tokenFile)
        guard token.utf8.count >= 32, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "metrics.token_file",
                problem: "must hold a token of at least 32 printable characters without spaces; generate one with `openssl rand -hex 32`")
        }
        return token
    }
}
