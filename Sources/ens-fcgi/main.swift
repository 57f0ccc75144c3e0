import ArgumentParser
import ENSCore
import ENSResponder
import Logging
import POSIX

/// ens-fcgi: the FastCGI responder pool behind nginx.
struct ENSFastCGI: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ens-fcgi",
        abstract: "ENS FastCGI responder pool (run behind nginx).",
        discussion: """
            Listens on fcgi.socket (or a socket handed over by spawn-fcgi on descriptor 0, \
            or by systemd socket activation on descriptor 3) and starts fcgi.processes \
            worker processes of fcgi.threads threads each. SIGTERM stops accepting, \
            finishes requests in flight and exits 0; SIGHUP re-reads the configuration \
            (applies log.level, names the changes that need a restart).

            Started by a web server as a CGI program (GATEWAY_INTERFACE=CGI/1.1 and \
            REQUEST_METHOD in the environment), it answers that one request and exits; \
            the configuration then comes from $ENS_CONFIG, else /etc/ens/ens.conf.

            Exit status: 0 after a clean stop or a good --check, 1 on a configuration or \
            start-up error.
            """
    )

    @Option(name: .long, help: "Config file (default: $ENS_CONFIG, else /etc/ens/ens.conf).")
    var config: String?

    @Flag(name: .long, help: "Check the configuration and the secrets it names, print 'configuration OK' and exit.")
    var check = false

    @Flag(name: .long, help: "Use the socket on descriptor 0 (as spawn-fcgi passes it) instead of binding fcgi.socket.")
    var inheritSocket = false

    @Flag(name: .long, help: .hidden)
    var worker = false

    @Option(name: .long, help: .hidden)
    var slot = 0

    func run() throws {
        let path = ENSConfiguration.resolvePath(flag: config)
        let configuration: ENSConfiguration
        do {
            configuration = try ENSConfiguration.load(path: path)
            _ = try configuration.serviceDatabase()
            _ = try configuration.masterKey()
            // Graph tenants: complete, and each key matching its certificate. Checked by
            // the supervisor (and --check); a worker builds them once, in its services.
            if !worker { _ = try GraphServices.responder(configuration) }
        } catch {
            printError("ens-fcgi: \(error)")
            throw ExitCode(1)
        }
        if check {
            print("configuration OK")
            return
        }
        LogfmtLogHandler.bootstrap(label: worker ? "ens-fcgi-worker" : "ens-fcgi", level: configuration.logLevel)
        let logger = Logger(label: "ens-fcgi")
        if !worker { configuration.logDeprecatedKeys(logger) }
        if worker {
            // Each component gets its own part of the configuration, built here once.
            throw ExitCode(Worker(configuration: configuration, settings: ResponderSettings(configuration), listenFD: 0, slot: slot, logger: logger, configPath: path).run())
        }
        let source: Supervisor.SocketSource
        if inheritSocket {
            source = .inherited(0)
        } else if Environment.get("LISTEN_FDS") == "1", Environment.get("LISTEN_PID") == String(ProcessInfoLite.pid) {
            source = .inherited(3)
        } else {
            source = .bind
        }
        throw ExitCode(Supervisor(configuration: configuration, configPath: path, socketSource: source, logger: logger).run())
    }
}

// Started by a web server as a CGI program: one request, then exit (flags do not
// apply; the config comes from $ENS_CONFIG or /etc/ens/ens.conf).
// Before any secret is read, in the pool, its workers and a CGI run alike.
do {
    try CoreDumps.forbid()
} catch {
    printError("ens-fcgi: \(error)")
    ProcessInfoLite.exit(1)
}

if CGIResponder.isCGIRequest {
    let configuration: ENSConfiguration
    do {
        configuration = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: nil))
    } catch {
        printError("ens-fcgi: \(error)")
        ProcessInfoLite.exit(1)
    }
    LogfmtLogHandler.bootstrap(label: "ens-fcgi-cgi", level: configuration.logLevel)
    ProcessInfoLite.exit(CGIResponder.run(configuration: configuration, logger: Logger(label: "ens-fcgi")))
}

ENSFastCGI.main()
