internal import ENSHTTP
internal import ENSConfig
internal import ENSModel
internal import ENSMetrics
internal import ENSStore
internal import OpenSSL
internal import POSIX
internal import Logging
internal import MailBackends

/// GET /metrics: the Prometheus text format, for a scraper holding the bearer token in
/// metrics.token_file (`Authorization: Bearer <token>`); 401 for anyone else, 404 for
/// everyone when no token is configured. The web server's loopback-only rule is not
/// enough on its own: anything on the host (or a proxy in front) could ask, and the
/// answer says how busy the service is and how many users it has.
///
/// Counters come from every process's metrics file (see `MetricsText`); the
/// subscription and device gauges are the rows `ens-cron gauges` last stored
/// (`MetricGauges`), a read of a few rows by primary key instead of counting whole
/// tables on every scrape.
enum MetricsEndpoint {
    static let route = Route(methods: ["GET"], requiresAPIToken: false, readsAuthorization: true) { request, context in
        let directory = context.settings.metrics.directory
        guard !directory.isEmpty, let token = context.services.metricsToken else { throw APIError.notFound }
        guard authorized(request.authorization, token: token) else {
            var refused = APIResponse.error(401, .unauthorized, "A valid bearer token is required.")
            refused.extraHeaders.append(("WWW-Authenticate", #"Bearer realm="ens-metrics""#))
            return refused
        }
        let collected: (values: [String: Double], sources: Int, staleSources: Int)
        do {
            collected = try MetricsText.collect(directory: directory)
        } catch {
            context.logger.error("metrics.directory cannot be read", metadata: ["metrics.directory": "\(directory)", "error": "\(error)"])
            throw APIError.internalError
        }
        var values = collected.values
        values["ens_metrics_sources"] = Double(collected.sources)
        values["ens_metrics_stale_sources"] = Double(collected.staleSources)
        for (key, value) in try MetricGauges.stored(database: context.database) { values[key] = value }
        return APIResponse(status: 200, body: Array(MetricsText.render(values).utf8), contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    /// Whether `header` is `Bearer <token>`. Both sides are hashed first, so the
    /// comparison takes the same time whatever the offered token's length or content.
    static func authorized(_ header: String?, token: String) -> Bool {
        guard let header, header.utf8.count <= 1024 else { return false }
        let scheme = "bearer "
        guard header.utf8.count > scheme.utf8.count, header.prefix(scheme.count).lowercased() == scheme else { return false }
        let offered = header.dropFirst(scheme.count).trimmingCharacters(in: " \t")
        return Digest.constantTimeEqual(Digest.sha256(offered), Digest.sha256(token))
    }
}
