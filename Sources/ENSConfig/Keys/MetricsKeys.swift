extension ConfigSection {
    static let metrics = ConfigSection("Metrics", keys: [
        ConfigKey("metrics.dir", \.metricsDirectory, .emptyOr(.path), default: "/run/ens/metrics",
                  doc: "Each ENS process writes its counters here once a second; GET /metrics adds them up in the Prometheus text format, with the database gauges `ens-cron gauges` counted last (once a minute, in `ens-cron all`).",
                  details: """
                  Empty: off.
                  """),
        ConfigKey("metrics.token_file", \.metricsTokenFile, .emptyOr(.path), default: "",
                  doc: "GET /metrics answers only a request with `Authorization: Bearer <token>`, the token this file holds (at least 32 printable characters; `openssl rand -hex 32 > /etc/ens/secrets/metrics.token`, mode 0640 root:ens), compared in constant time; anything else gets 401.",
                  details: """
                  Give Prometheus the same file (`authorization: credentials_file:`). Empty:
                  /metrics answers 404 to everyone. nginx and Apache also keep /metrics to
                  loopback. Read at start: restart ens-fcgi after changing it.
                  """),
    ])
}
