internal import ENSStore
import ENSConfig
import ENSResponder
import Logging
import POSIX
internal import MailBackends
internal import ENSModel

/// ens-fcgi: the FastCGI responder pool behind nginx (`ResponderOptions.usage`).
func runPool(_ options: ResponderOptions) -> Int32 {
    let path = ENSConfiguration.resolvePath(flag: options.config)
    let configuration: ENSConfiguration
    do {
        configuration = try ENSConfiguration.load(path: path)
        _ = try configuration.serviceShards()  // db.* and the shard map, if any
        _ = try configuration.secrets.masterKey()
        _ = try configuration.metrics.token()
        // Graph tenants: complete, and each key matching its certificate. Checked by
        // the supervisor (and --check); a worker builds them once, in its services.
        if !options.worker { _ = try GraphServices.responder(configuration) }
    } catch {
        printError("ens-fcgi: \(error)")
        return 1
    }
    if options.check {
        print("configuration OK")
        return 0
    }
    LogfmtLogHandler.bootstrap(label: options.worker ? "ens-fcgi-worker" : "ens-fcgi", level: configuration.logging.level)
    let logger = Logger(label: "ens-fcgi")
    if options.worker {
        return Worker(configuration: configuration, listenFD: 0, slot: options.slot, logger: logger,
                      configPath: path, limitsFD: options.limitsFD).run()
    }
    configuration.logDeprecatedKeys(logger)
    let source: Supervisor.SocketSource
    if options.inheritSocket {
        source = .inherited(0)
    } else if Environment.get("LISTEN_FDS") == "1", Environment.get("LISTEN_PID") == String(ProcessInfoLite.pid) {
        source = .inherited(3)
    } else {
        source = .bind
    }
    return Supervisor(configuration: configuration, configPath: path, socketSource: source, logger: logger).run()
}

// Before any secret is read, in the pool, its workers and a CGI run alike.
do {
    try CoreDumps.forbid()
} catch {
    printError("ens-fcgi: \(error)")
    ProcessInfoLite.exit(1)
}

// Started by a web server as a CGI program: one request, then exit (flags do not
// apply; the config comes from $ENS_CONFIG or /etc/ens/ens.conf).
if CGIResponder.isCGIRequest {
    let configuration: ENSConfiguration
    do {
        configuration = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: nil))
    } catch {
        printError("ens-fcgi: \(error)")
        ProcessInfoLite.exit(1)
    }
    LogfmtLogHandler.bootstrap(label: "ens-fcgi-cgi", level: configuration.logging.level)
    ProcessInfoLite.exit(CGIResponder.run(configuration: configuration, logger: Logger(label: "ens-fcgi")))
}

do {
    switch try ResponderOptions.parse(Array(CommandLine.arguments.dropFirst())) {
    case .help:
        print(ResponderOptions.usage, terminator: "")
        ProcessInfoLite.exit(0)
    case .version:
        print("ens-fcgi \(Release.version)")
        ProcessInfoLite.exit(0)
    case .run(let options):
        ProcessInfoLite.exit(runPool(options))
    }
} catch {
    printError("ens-fcgi: \(error)\n\(ResponderOptions.usage)")
    ProcessInfoLite.exit(64)
}
