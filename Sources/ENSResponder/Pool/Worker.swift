internal import ENSHTTP
internal import ENSStore
public import ENSConfig
internal import ENSMetrics
internal import FastCGI
public import Logging
internal import POSIX
internal import SenderWire
internal import MailBackends

/// One responder process: `threads` threads, each accepting FastCGI requests on the
/// inherited listening socket with its own request slot and database connections (one
/// per shard it has needed).
///
/// On SIGTERM/SIGINT it stops accepting, lets requests in flight finish, and exits; on
/// SIGHUP it re-reads its configuration file (`ConfigReload`).
public struct Worker {
    /// The configuration the process started with; its threads' contexts read it through
    /// `LiveSettings`, which a reload updates.
    let configuration: ENSConfiguration
    let listenFD: Int32
    /// The supervisor's slot number: names this worker's metrics file, so a replacement
    /// continues its predecessor's counters.
    let slot: Int
    let logger: Logger
    /// Where the configuration was read from, for a reload.
    let configPath: String
    /// The pool's shared request-limit table (`RequestLimits`), when it has one.
    let limitsFD: Int32?

    public init(configuration: ENSConfiguration, listenFD: Int32, slot: Int, logger: Logger, configPath: String,
                limitsFD: Int32? = nil) {
        self.configPath = configPath
        self.limitsFD = limitsFD
        self.configuration = configuration
        self.listenFD = listenFD
        self.slot = slot
        self.logger = logger
    }

    /// Runs until a shutdown signal; returns the process exit status.
    public func run() -> Int32 {
        Signals.ignoreBrokenPipe()
        do {
            try FastCGILibrary.initialize()
        } catch {
            logger.critical("cannot initialise libfcgi", metadata: ["error": "\(error)"])
            return 1
        }
        // Block shutdown signals before any thread exists, so only sigwait sees them
        // (libfcgi's own SIGTERM handler would otherwise only set a flag).
        Signals.block(Signals.shutdownSignals + [Signals.reload])
        if configuration.pool.batchScheduling {
            do {
                try Scheduling.useBatchPolicy()
            } catch {
                logger.warning("cannot switch to batch scheduling", metadata: ["error": "\(error)"])
            }
        }

        let shards: ShardDatabases
        let services: SharedServices
        do {
            shards = try configuration.serviceShards()
            services = try .responder(configuration, keyCacheSize: configuration.secrets.keyCacheSize,
                                      concurrentRegistrations: configuration.exchange.maximumConcurrentRegistrations,
                                      slowCallbacks: configuration.exchange.maximumSlowCallbacks)
        } catch {
            logger.critical("invalid configuration", metadata: ["error": "\(error)"])
            return 1
        }
        var limits: RequestLimits?
        if configuration.limits.mode != .off {
            do {
                let rates = RequestLimits.rates(configuration)
                limits = try limitsFD.map { fd throws(SystemError) in try .inherited(fd: fd, mode: configuration.limits.mode, rates: rates) }
                    ?? .file(path: configuration.limits.tableFile, mode: configuration.limits.mode, rates: rates)
            } catch {
                logger.critical("cannot map the request limits table", metadata: ["error": "\(error)"])
                return 1
            }
        }
        let connections: ConnectionMultiplexer
        do {
            connections = try ConnectionMultiplexer(listenFD: listenFD)
        } catch {
            logger.critical("cannot watch the listening socket", metadata: ["error": "\(error)"])
            return 1
        }
        let apiTokens = services.apiTokens
        let router = Router.ens()
        let dispatcher = Dispatcher(router: router, maxBodyBytes: configuration.pool.maxBodyBytes,
                                    limits: limits, tokenCheck: { apiTokens.isValid($0) })
        let metrics = MetricsRecorder(file: configuration.metrics.file("fcgi-\(slot)"))
        let counters = metrics.file == nil ? [] : (0..<configuration.pool.threads).map { _ in RequestCounters(labels: router.labels) }
        if apiTokens.count == 0 {
            logger.warning("no API tokens loaded; every authenticated request will get 401",
                           metadata: ["auth.token_cache_file": "\(configuration.secrets.apiTokenCacheFile)"])
        }
        var threads: [OSThread] = []
        let live = LiveSettings(configuration)
        for index in 0..<configuration.pool.threads {
            let settings = configuration
            var threadLogger = logger
            threadLogger[metadataKey: "thread"] = "\(index)"
            let logger = threadLogger
            do {
                let threadCounters = counters.isEmpty ? nil : counters[index]
                threads.append(try OSThread.start {
                    Self.serve(connections: connections, dispatcher: dispatcher, context: RequestContext(
                        settings: settings, services: services,
                        shards: ShardConnections(shards), logger: logger, requestCounters: threadCounters, live: live))
                })
            } catch {
                logger.critical("cannot start responder thread", metadata: ["error": "\(error)"])
                return 1
            }
        }
        let liveness = services.liveness
        let flusherLogger = logger
        let flusher: OSThread
        do {
            flusher = try OSThread.start {
                liveness.run(shards: ShardConnections(shards), logger: flusherLogger)
            }
        } catch {
            logger.critical("cannot start the check-in and heartbeat flusher", metadata: ["error": "\(error)"])
            return 1
        }
        let metricsLogger = logger
        let baseline = metrics.snapshot
        let metricsWriter: OSThread?
        do {
            metricsWriter = try OSThread.start { metrics.run(logger: metricsLogger) { metrics.publish(counters, baseline: baseline) } }
        } catch {
            // The pool serves without its metrics file rather than not at all; /metrics
            // then lacks this process, and this line says why.
            logger.error("cannot start the metrics writer; this process's counters are not published", metadata: ["error": "\(error)"])
            metricsWriter = nil
        }
        logger.info("responder started", metadata: ["threads": "\(threads.count)"])
        // Under systemd (Type=notify, NotifyAccess=all): the pool is ready once a worker serves.
        SystemdNotifier.notify("READY=1")

        var signal = Signals.wait(for: Signals.shutdownSignals + [Signals.reload])
        while signal == Signals.reload {
            // A reload also lets go of the connections kept to ens-sender: the next
            // hand-offs connect afresh, to push.socket as it now is.
            services.senderConnections.closeIdle()
            if let fresh = ConfigReload.perform(path: configPath, running: configuration.file, logger: logger,
                                                alsoApplied: ConfigReload.responderKeys) {
                live.update { $0.reloading(.responders, from: fresh) }
            }
            signal = Signals.wait(for: Signals.shutdownSignals + [Signals.reload])
        }
        logger.info("shutting down", metadata: ["signal": "\(Signals.name(signal))"])
        // Threads waiting for work wake up and stop; threads in the middle of a request
        // finish it first. Kept-alive connections close when the process exits.
        connections.shutdown()
        for thread in threads { thread.join() }
        liveness.stop()
        flusher.join()
        metrics.stop()
        metricsWriter?.join()
        logger.info("responder stopped")
        return 0
    }

    private static func serve(connections: ConnectionMultiplexer, dispatcher: Dispatcher, context: RequestContext) {
        let slot: FastCGIRequest
        do {
            slot = try FastCGIRequest(connections: connections)
        } catch {
            context.logger.critical("cannot create FastCGI request", metadata: ["error": "\(error)"])
            return
        }
        while slot.accept(from: connections) {
            context.refreshSettings()
            dispatcher.respond(to: slot, context: context)
            // Read the request's standard input to its end before the connection is
            // kept for the next request: libfcgi does not, and a kept connection whose
            // next record is the last request's (empty) stdin record fails the next
            // FCGX_Accept_r as a protocol error, closing it under the web server's next
            // request. nginx writes params and stdin at once, so libfcgi has usually
            // read both; Apache's mod_proxy_fcgi (enablereuse=on) writes the stdin
            // record separately (AH01067 and a 503 for about 1 request in 300 without
            // this). The web server bounds the body (client_max_body_size, Apache's
            // 4 MiB), and an unread body is short: the dispatcher refused it.
            while !slot.readBody(limit: 4096).isEmpty {}
            slot.finish(returningConnectionTo: connections)
            context.runWorkAfterTheAnswer()
        }
    }
}
