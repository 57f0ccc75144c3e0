import ArgumentParser
import ENSCore
import Logging
import POSIX

/// ens-apns: the APNs sender. This first version owns its socket and lifecycle (live
/// instance check, clean SIGTERM exit); the spool and HTTP/2 client come with the
/// sender issue.
struct ENSAPNs: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ens-apns",
        abstract: "ENS APNs sender: takes notifications from the responders on apns.socket.",
        discussion: "Exit status: 0 after a clean stop or a good --check, 1 on a configuration or start-up error."
    )

    @Option(name: .long, help: "Config file (default: $ENS_CONFIG, else /etc/ens/ens.conf).")
    var config: String?

    @Flag(name: .long, help: "Check the configuration, print 'configuration OK' and exit.")
    var check = false

    func run() throws {
        let settings: ENSConfiguration
        do {
            settings = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: config))
        } catch {
            printError("ens-apns: \(error)")
            throw ExitCode(1)
        }
        if check {
            print("configuration OK")
            return
        }
        LogfmtLogHandler.bootstrap(label: "ens-apns", level: settings.logLevel)
        let logger = Logger(label: "ens-apns")
        Signals.ignoreBrokenPipe()
        Signals.block(Signals.shutdownSignals)
        let listener: (fd: Int32, inode: UInt64)
        do {
            listener = try UnixSocket.listen(path: settings.apnsSocket, mode: 0o660, backlog: 128)
        } catch {
            logger.critical("cannot listen", metadata: ["socket": "\(settings.apnsSocket)", "error": "\(error)"])
            throw ExitCode(1)
        }
        logger.info("sender started", metadata: ["socket": "\(settings.apnsSocket)"])
        let signal = Signals.wait(for: Signals.shutdownSignals)
        logger.info("sender stopping", metadata: ["signal": "\(Signals.name(signal))"])
        FileDescriptor.close(listener.fd)
        UnixSocket.unlinkIfOurs(path: settings.apnsSocket, inode: listener.inode)
    }
}

ENSAPNs.main()
