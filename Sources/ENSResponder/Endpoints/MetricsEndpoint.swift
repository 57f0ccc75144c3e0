internal import ENSCore
internal import POSIX
internal import MariaDB

/// GET /metrics: the Prometheus text format. Counters come from every process's
/// metrics file (see `MetricsText`); subscription and device gauges are counted in
/// MariaDB at scrape time. nginx serves this location to loopback only.
enum MetricsEndpoint {
    static let route = Route(methods: ["GET"], requiresAPIToken: false) { _, context in
        let directory = context.settings.metricsDirectory
        guard !directory.isEmpty else { throw APIError.notFound }
        let collected = MetricsText.collect(directory: directory)
        var values = collected.values
        values["ens_metrics_sources"] = Double(collected.sources)
        values["ens_metrics_stale_sources"] = Double(collected.staleSources)
        for (key, value) in try databaseGauges(context) { values[key] = value }
        return APIResponse(status: 200, body: Array(MetricsText.render(values).utf8), contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    /// Records by subscription state (healthy: heard from within the status frequency
    /// plus grace; stale: registered but silent; unregistered) and devices by state.
    private static func databaseGauges(_ context: RequestContext) throws -> [String: Double] {
        var values: [String: Double] = [:]
        for state in ["healthy", "stale", "unregistered"] { values[MetricsText.key("ens_subscriptions", [("state", state)])] = 0 }
        for group in try SubscriptionHealth.groups(database: context.database, grace: context.settings.deviceAPI.subscriptionGrace, now: .now()) {
            values[MetricsText.key("ens_subscriptions", [("state", group.state)]), default: 0] += Double(group.count)
        }
        values[MetricsText.key("ens_devices", [("state", "enabled")])] = 0
        values[MetricsText.key("ens_devices", [("state", "disabled")])] = 0
        for row in try context.database.query("""
            SELECT IF(disabled_at IS NULL, 'enabled', 'disabled') AS state, COUNT(*) FROM Devices GROUP BY state
            """) {
            let (state, count) = try row.decode(String.self, Int64.self)
            values[MetricsText.key("ens_devices", [("state", state)])] = Double(count)
        }
        return values
    }
}
