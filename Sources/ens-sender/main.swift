internal import ENSStore
import ArgumentParser
import ENSSender
import Logging
import OpenSSL
import POSIX
internal import ENSConfig
internal import ENSMetrics
internal import ENSModel

/// ens-sender: the push sender (APNs and FCM); `drain` hands a lost host's spool to it.
/// A command of its own, so that each has its own --config. Up to 0.3.0 it was called
/// ens-apns, after its first provider; 0.4.0 kept that name as a link, 0.5.0 dropped it.
struct SenderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ens-sender",
        abstract: "ENS push sender (serve, the default) and its drain command.",
        version: "ens-sender \(Release.version)",
        subcommands: [Serve.self, Drain.self],
        defaultSubcommand: Serve.self
    )
}

/// The sender itself.
struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "ENS push sender: takes notifications from the responders on push.socket, spools them durably and delivers them to APNs and FCM " +
                  "over HTTP/2.",
        discussion: """
            A notification is acknowledged only once it is appended to the spool log in \
            push.spool_dir and fdatasynced; after a crash or restart the spool is replayed. SIGTERM stops \
            taking notifications, lets requests in flight finish, and exits 0; SIGHUP re-reads the \
            configuration (applies log.level, names the changes that need a restart).

            Exit status: 0 after a clean stop or a good --check, 1 on a configuration or start-up error.
            """
    )

    @Option(name: .long, help: "Config file (default: $ENS_CONFIG, else /etc/ens/ens.conf).")
    var config: String?

    @Flag(name: .long, help: "Check the configuration and the keys it names, print 'configuration OK' and exit.")
    var check = false

    func run() throws {
        let settings: ENSConfiguration
        let credentials: APNsCredentials
        let fcmAccounts: [String: FCMServiceAccount]
        let masterKey: AESGCMKey
        let hostName: String
        do {
            try CoreDumps.forbid()  // before any secret is read
            settings = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: config))
            masterKey = try settings.secrets.masterKey()
            _ = try settings.serviceShards()  // db.* and the shard map, if any
            credentials = try Self.credentials(settings)
            fcmAccounts = try Self.fcmAccounts(settings)
            hostName = try settings.push.senderHostName()
        } catch {
            printError("ens-sender: \(error)")
            throw ExitCode(1)
        }
        if check {
            print("configuration OK")
            return
        }
        LogfmtLogHandler.bootstrap(label: "ens-sender", level: settings.logging.level)
        let logger = Logger(label: "ens-sender")
        settings.logDeprecatedKeys(logger)
        Signals.ignoreBrokenPipe()
        Signals.block(Signals.shutdownSignals + [Signals.reload])

        let sender: Sender
        let ingest: Ingest
        let heartbeat: SenderHeartbeat
        let listener: (fd: Int32, inode: UInt64)
        let metrics = MetricsRecorder(file: settings.metrics.file("apns"))
        do {
            // Refuses to start over a live sender (UnixSocket.listen connects first);
            // taken before the spool is opened, since opening it tidies up segments.
            listener = try UnixSocket.listen(path: settings.push.socket, mode: 0o660, backlog: 512)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
        do {
            let spool = try Spool(directory: settings.push.spoolDirectory, masterKey: masterKey, capacity: settings.push.spoolCapacity)
            let recovery = spool.recovery
            if recovery.tornSegments > 0 || recovery.imported > 0 {
                logger.notice("spool recovered", metadata: [
                    "spool.size": "\(recovery.pending)", "spool.torn_segments": "\(recovery.tornSegments)", "spool.imported": "\(recovery.imported)",
                ])
            }
            var providers: [any PushProvider] = [APNsProvider(credentials: credentials, productionURL: settings.apns.productionURL,
                                                              sandboxURL: settings.apns.sandboxURL)]
            if !fcmAccounts.isEmpty {
                providers.append(try FCMProvider(accounts: fcmAccounts, url: settings.fcm.url, caBundlePath: settings.push.caFile))
            }
            sender = Sender(
                spool: spool,
                providers: providers,
                settings: .init(caBundlePath: settings.push.caFile, maximumInFlight: settings.push.maximumInFlight,
                                connectionsPerHost: settings.push.connectionsPerHost, credentialPause: settings.push.credentialPause),
                databases: try settings.serviceShards(),
                metrics: metrics,
                logger: logger
            )
            ingest = try Ingest(listener: listener.fd, spool: spool, metrics: metrics, logger: logger, handOff: sender.enqueue)
            heartbeat = SenderHeartbeat(host: hostName, spool: spool, database: try settings.serviceDatabase(), logger: logger)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            UnixSocket.unlinkIfOurs(path: settings.push.socket, inode: listener.inode)
            throw ExitCode(1)
        }
        logger.info("sender started", metadata: [
            "socket": "\(settings.push.socket)", "spool.dir": "\(settings.push.spoolDirectory)", "host": "\(hostName)",
            "auth.token": "\(credentials.token != nil)", "auth.certificates": "\(credentials.certificates.keys.sorted().joined(separator: ","))",
            "fcm.packages": "\(fcmAccounts.keys.sorted().joined(separator: ","))",
        ])

        let delivery = try OSThread.start(stackSize: 1 << 20) { sender.deliver() }
        let metricsLogger = logger
        let metricsWriter: OSThread?
        do {
            metricsWriter = try OSThread.start { metrics.run(logger: metricsLogger, refresh: sender.refreshGauges) }
        } catch {
            // Delivery goes on without the metrics file; this line says why /metrics lacks it.
            logger.error("cannot start the metrics writer; the sender's counters are not published", metadata: ["error": "\(error)"])
            metricsWriter = nil
        }
        let intake = try OSThread.start { ingest.run() }
        let beating = try OSThread.start { heartbeat.run() }

        // Under systemd (Type=notify): ready once the socket listens and delivery runs;
        // with WatchdogSec=, alive as long as this thread answers.
        SystemdNotifier.notify("READY=1")
        let watchdogMilliseconds = SystemdNotifier.watchdogInterval?.wholeMilliseconds
        var received: Int32?
        while received == nil {
            received = Signals.wait(for: Signals.shutdownSignals + [Signals.reload], timeoutMilliseconds: max(100, watchdogMilliseconds ?? 3_600_000))
            if received == Signals.reload {
                ConfigReload.perform(path: ENSConfiguration.resolvePath(flag: config), running: settings.file, logger: logger)
                received = nil
            }
            if received == nil, watchdogMilliseconds != nil { SystemdNotifier.notify("WATCHDOG=1") }
        }
        let signal = received ?? Signals.terminate
        logger.info("sender stopping", metadata: ["signal": "\(Signals.name(signal))"])
        SystemdNotifier.notify("STOPPING=1")
        ingest.stop()
        intake.join()
        UnixSocket.unlinkIfOurs(path: settings.push.socket, inode: listener.inode)
        sender.stop()
        delivery.join()
        heartbeat.stop()  // its last row: what delivery left in the spool
        beating.join()
        metrics.stop()
        metricsWriter?.join()
        FileDescriptor.close(listener.fd)
    }
}

extension Serve {
    /// Token auth (if apns.key_id is set) and a certificate per configured bundle id.
    static func credentials(_ settings: ENSConfiguration) throws -> APNsCredentials {
        var token: ProviderToken?
        if let pem = try settings.apns.signingKeyPEM() {
            do {
                token = ProviderToken(key: try ECSigningKey(pem: pem), keyID: settings.apns.keyID, teamID: settings.apns.teamID)
            } catch {
                throw ConfigError(key: "apns.key_file", problem: "does not hold a P-256 private key (.p8): \(error)")
            }
        }
        var certificates: [String: ClientIdentity] = [:]
        for bundleID in settings.apns.certificates.keys.sorted() {
            let file = try settings.apns.certificate(bundleID: bundleID)
            let problem = "does not hold a certificate and its key (\(file.isPKCS12 ? "PKCS#12" : "PEM"))"
            if file.isPKCS12 {
                do {
                    certificates[bundleID] = try ClientIdentity(pkcs12: file.bytes, password: file.password)
                } catch {
                    throw ConfigError(key: "apns.certificate.\(bundleID)", problem: "\(problem): \(error.operation)")
                }
            } else {
                do {
                    certificates[bundleID] = try ClientIdentity(pem: file.bytes)
                } catch {
                    throw ConfigError(key: "apns.certificate.\(bundleID)", problem: "\(problem): \(error.operation)")
                }
            }
        }
        return APNsCredentials(token: token, certificates: certificates)
    }

    /// The FCM service account configured per Android package name.
    static func fcmAccounts(_ settings: ENSConfiguration) throws -> [String: FCMServiceAccount] {
        var accounts: [String: FCMServiceAccount] = [:]
        for (package, path) in settings.fcm.serviceAccountFiles {
            let key = "fcm.service_account.\(package)"
            let bytes: [UInt8]
            do {
                bytes = try Files.read(path, limit: 64 * 1024)
            } catch {
                throw ConfigError(key: key, problem: "cannot read \(path): \(error)")
            }
            do {
                accounts[package] = try FCMServiceAccount(json: bytes)
            } catch {
                throw ConfigError(key: key, problem: "is not a service-account key file: \(error.problem)")
            }
        }
        return accounts
    }
}

SenderCommand.main()
