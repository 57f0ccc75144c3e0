internal import ENSHTTP
internal import ENSStore
public import ENSConfig
public import Logging
internal import POSIX
internal import MailBackends

/// ens-fcgi started as a CGI program (RFC 3875): one request in the environment and on
/// standard input, one answer on standard output, then exit. A web server that may not
/// run daemons (shared and managed hosts, Apache's mod_cgi) starts it so.
///
/// Detected from the environment: `GATEWAY_INTERFACE` is `CGI/1.x` and
/// `REQUEST_METHOD` is set. A FastCGI worker never has those in its process
/// environment (FastCGI passes them per request), so the two modes cannot be confused.
///
/// The answer is the pool's, byte for byte: the same router, dispatcher, limits and
/// logging. What costs time at start-up stays out of this path: no threads, no key
/// generation (the pool is filled by `ens-cron keys`, as always), no metrics file; the
/// API token cache is read once, check-ins are written before exit.
public enum CGIResponder {
    public static var isCGIRequest: Bool {
        Environment.get("GATEWAY_INTERFACE")?.hasPrefix("CGI/") == true && Environment.get("REQUEST_METHOD") != nil
    }

    /// Serves the one request; the exit status (0 once an answer was written, even an
    /// error answer; 1 only when the configuration is unusable, which the web server
    /// turns into its own 500).
    public static func run(configuration: ENSConfiguration, logger: Logger) -> Int32 {
        let services: SharedServices
        let shards: ShardConnections
        do {
            shards = ShardConnections(try configuration.serviceShards())
            // One request per process: the per-process gates cannot bound anything
            // across processes; the web server's own limits do that.
            services = try .responder(configuration, keyCacheSize: 1, concurrentRegistrations: 1, slowCallbacks: 1)
        } catch {
            logger.critical("invalid configuration", metadata: ["error": "\(error)"])
            return 1
        }
        let context = RequestContext(settings: configuration, services: services, shards: shards, logger: logger)
        let apiTokens = services.apiTokens
        // The limits' counters, shared with every other CGI run through a file (only
        // when the web server asks, or limits.enforce says always).
        var limits: RequestLimits?
        if configuration.limits.mode == .always || (configuration.limits.mode == .whenAsked && Environment.get("ENS_LIMITS") == "1") {
            do {
                limits = try .file(path: configuration.limits.tableFile, mode: configuration.limits.mode, rates: RequestLimits.rates(configuration))
            } catch {
                // Without its counters the request is still answered: the limits are a
                // guard against floods, and a missing table must not stop the service.
                logger.error("request limits table unusable", metadata: ["error": "\(error)"])
            }
        }
        Dispatcher(router: .ens(), maxBodyBytes: configuration.pool.maxBodyBytes, limits: limits, tokenCheck: { apiTokens.isValid($0) })
            .respond(to: CGIRequest(), context: context)
        // The web server takes the answer as complete only when standard output ends; work
        // left for after the answer (a Graph lifecycle event's renewal) must not hold it.
        do {
            try FileDescriptor.detachToDevNull(1)
        } catch {
            logger.warning("standard output not closed before the work after the answer", metadata: ["error": "\(error)"])
        }
        context.runWorkAfterTheAnswer()
        do {
            try services.liveness.flush(shards: shards.database(shard:))
        } catch {
            logger.warning("check-in or heartbeat not written", metadata: ["db.error": "\(error)"])
        }
        shards.closeAll()
        return 0
    }
}

/// The request of a CGI program: the process environment, standard input and output.
struct CGIRequest: RequestChannel {
    func parameter(_ name: String) -> [UInt8]? {
        if let value = Environment.get(name) { return Array(value.utf8) }
        // Servers that run a program for a path give it as SCRIPT_NAME plus PATH_INFO
        // (nginx's FastCGI gives DOCUMENT_URI).
        if name == "DOCUMENT_URI", let script = Environment.get("SCRIPT_NAME") {
            return Array((script + (Environment.get("PATH_INFO") ?? "")).utf8)
        }
        return nil
    }

    func readBody(limit: Int) -> [UInt8] {
        var body: [UInt8] = []
        while body.count < limit {
            guard let chunk = try? FileDescriptor.read(0, maximum: min(65536, limit - body.count)), !chunk.isEmpty else { break }
            body += chunk
        }
        return body
    }

    func write(_ bytes: [UInt8]) {
        // A client that went away is the server's business, not an error to report.
        try? FileDescriptor.writeAll(1, bytes)
    }
}
