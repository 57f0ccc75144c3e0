internal import ENSModel
import ArgumentParser
import ENSSender
import Logging
import OpenSSL
import POSIX
internal import ENSConfig
internal import ENSStore
internal import SenderWire

/// `ens-sender drain`: another host's spool, handed to this host's running sender.
struct Drain: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Hand the notifications in a lost host's spool directory to this host's running ens-sender.",
        discussion: """
            --from names a copy (or a mount) of the lost host's push.spool_dir; it must be writable, \
            and the hosts must share the master key. Each notification is marked done there only \
            after this host's sender acknowledged it, so a drain that is interrupted can simply be run \
            again (a notification handed over twice keeps its id, its apns-collapse-id: the device shows it once). \
            Segments handed over to the end are removed; damaged ones are reported and left. With \
            --host, that host's row in SenderHosts is removed once its spool is empty.

            Exit status: 0 when the spool is empty afterwards, 2 when something was left in it \
            (reported on standard error), 1 when the drain could not run or stopped.
            """
    )

    @Option(name: .long, help: "Config file of this host (default: $ENS_CONFIG, else /etc/ens/ens.conf).")
    var config: String?

    @Option(name: .long, help: "The lost host's spool directory (a copy or a mount).")
    var from: String

    @Option(name: .long, help: "The lost host's name (push.host_name) as `ens-cron status` lists it.")
    var host: String?

    func run() throws {
        let settings: ENSConfiguration
        let masterKey: AESGCMKey
        do {
            try CoreDumps.forbid()  // before the master key is read
            settings = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: config))
            masterKey = try settings.secrets.masterKey()
            try refuseLiveSpools(settings)
        } catch {
            fail("\(error)")
        }
        LogfmtLogHandler.bootstrap(label: "ens-sender", level: settings.logging.level)
        let lock: Int32?
        do {
            lock = try Files.tryLock(from + "/drain.lock")
        } catch {
            fail("cannot lock \(from)/drain.lock: \(error) (the spool to drain must be writable)")
        }
        guard let lock else { fail("another ens-sender drain is working on \(from)") }
        defer { FileDescriptor.close(lock) }

        let client = SenderClient(socketPath: settings.push.socket, timeoutMilliseconds: 30_000)
        let progress = TerminalProgress.shared
        let drain = SpoolDrain(directory: from, masterKey: masterKey, submit: client.submit(batch:),
                               report: { progress.finish(); printError("ens-sender drain: \($0)") },
                               progress: { progress.report("notifications handed over", $0) })
        let summary: SpoolDrain.Summary
        do {
            summary = try drain.run()
        } catch {
            progress.finish()
            fail("\(error)")
        }
        progress.finish()
        Logger(label: "ens-sender").notice("spool drained", metadata: [
            "host": "\(host ?? "-")", "handed_over": "\(summary.handedOver)", "expired": "\(summary.expired)",
            "unreadable": "\(summary.unreadable)", "refused": "\(summary.refused)",
            "segments.damaged": "\(summary.damagedSegments)", "segments.left": "\(summary.segmentsLeft)",
        ])
        print("drained \(from): \(summary.handedOver) notifications handed to this host's sender, \(summary.expired) expired, "
              + "\(summary.unreadable) unreadable, \(summary.refused) refused, \(summary.damagedSegments) damaged segment(s); "
              + (summary.isEmpty ? "the spool is empty" : "\(summary.segmentsLeft) segment file(s) left"))
        guard summary.isEmpty else { throw ExitCode(2) }
        if let host { forget(host, settings) }
    }

    /// The local sender's own spool is delivered by that sender; draining it too would
    /// race it for the same records. A named host still beating is running and keeps
    /// its spool.
    private func refuseLiveSpools(_ settings: ENSConfiguration) throws {
        guard let source = Files.identity(from) else { throw ConfigError(key: nil, problem: "\(from) does not exist") }
        if let own = Files.identity(settings.push.spoolDirectory), own == source {
            throw ConfigError(key: nil,
                problem: "\(from) is this host's own spool (push.spool_dir), which its ens-sender delivers; drain only a lost host's spool")
        }
        guard let host else { return }
        guard ENSConfiguration.isValidSenderHostName(host) else { throw ConfigError(key: nil,
                                                                                    problem: "--host '\(host.prefix(80))' is not a host name") }
        if host == (try? settings.push.senderHostName()) {
            throw ConfigError(key: nil, problem: "--host \(host) is this host; drain only a lost host's spool")
        }
        let database = Databases.connection(try settings.serviceDatabase())
        // try? (ignored on purpose): a lost host is often lost with the database it used;
        // the heartbeat check is a guard against draining a live host, not a condition.
        if let row = try? SenderHost.all(database: database).first(where: { $0.host == host }), !row.isSilent(now: .now()) {
            throw ConfigError(key: nil,
                              problem: "\(host) wrote its sender heartbeat at \(row.heartbeatAt.databaseString.prefix(19)) UTC: its ens-sender is " +
                                       "running; stop it before draining its spool")
        }
    }

    /// Removes the drained host's heartbeat row, so `ens-cron status` stops reporting it.
    private func forget(_ host: String, _ settings: ENSConfiguration) {
        do {
            let database = Databases.connection(try settings.serviceDatabase())
            if try SenderHost.forget(host, database: database, now: .now()) {
                print("removed \(host) from SenderHosts")
            }
        } catch {
            printError("ens-sender drain: cannot remove \(host) from SenderHosts (\(error)); `ens-cron status` lists it until it is removed")
        }
    }

    private func fail(_ message: String) -> Never {
        printError("ens-sender drain: \(message)")
        Self.exit(withError: ExitCode(1))
    }
}
