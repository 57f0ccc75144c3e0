public import ENSConfig
public import ENSModel
internal import ENSStore
internal import ENSVault
internal import Graph
internal import Logging
internal import MailBackends
internal import POSIX
internal import SenderWire

/// The jobs `ens-cron` runs (reap, renew, sync-keys, gauges, api-keys, keys), each
/// logging one summary line and recording its outcome for `ens-cron status`
/// (cron.status_file). ens-cron parses the command line and takes the locks; this is
/// what runs under them.
public struct Jobs {
    public let settings: ENSConfiguration
    let database: Database
    let maintenance: Maintenance
    let logger = Logger(label: "ens-cron")

    public init(settings: ENSConfiguration, now: Timestamp) throws {
        self.settings = settings
        database = Databases.connection(try settings.serviceDatabase())
        maintenance = Maintenance(database: database, policy: settings.maintenancePolicy, now: now, logger: Logger(label: "ens-cron"),
                                  progress: { what, rows in TerminalProgress.shared.report(what, rows) })
    }

    /// Runs one job and records how it went; a status file that cannot be written is
    /// logged, never the job's failure.
    private func recorded(_ job: String, _ body: () throws -> Void) throws {
        let started = MonotonicClock.milliseconds()
        var outcome = "failed"
        defer {
            TerminalProgress.shared.finish()
            let took = Duration.milliseconds(Int64(MonotonicClock.milliseconds() - started))
            do {
                try CronJobLog(path: settings.cronStatusFile).record(.init(job: job, outcome: outcome, finishedAt: .now(), took: took))
            } catch {
                logger.warning("cannot record the job's outcome for ens-cron status", metadata: ["job": "\(job)", "error": "\(error)"])
            }
        }
        try body()
        outcome = "ok"
    }

    public func apiKeys() throws {
        try recorded("api-keys") {
            let count = try APITokens.writeCache(path: settings.apiTokenCacheFile, database: database)
            logger.info("api-keys done", metadata: ["tokens": "\(count)"])
        }
    }

    public func reap() throws {
        try recorded("reap") { try reapNow() }
    }

    private func reapNow() throws {
        let counts = try maintenance.reap()
        maintenance.warnAboutLostSenders()
        logger.info("reap done", metadata: [
            "devices.stale": "\(counts.staleDevices)", "devices.disabled": "\(counts.disabledDevices)",
            "records.empty": "\(counts.emptyRecords)", "ewsurlcache.expired": "\(counts.expiredURLCache)",
            "events.forgotten": "\(counts.forgottenEvents)", "notifications.content_erased": "\(counts.expiredContent)",
            "notifications.removed": "\(counts.oldNotifications)", "credentials.abandoned": "\(counts.abandonedCredentials)",
            "proof_failures.expired": "\(counts.expiredProofFailures)",
            "subscriptions.ended_with_supplier": "\(counts.subscriptionsEndedWithSupplier)",
        ])
        print("reap: \(counts.staleDevices) stale devices, \(counts.disabledDevices) disabled devices, \(counts.emptyRecords) empty records, \(counts.expiredURLCache) expired URL cache rows removed; \(counts.expiredContent) secure contents erased, \(counts.oldNotifications) notification log entries removed; \(counts.abandonedCredentials) abandoned registrations' credentials erased; \(counts.expiredProofFailures) expired proof failure counts removed; \(counts.subscriptionsEndedWithSupplier) subscriptions ended with the device that supplied their credentials")
    }

    public func renew() throws {
        try recorded("renew") { try renewNow() }
    }

    private func renewNow() throws {
        let vault = Vault(masterKey: try settings.masterKey())
        let keepers = try MailBackendTable.keepers(settings, vault: vault)
        let counts = try maintenance.renew(vault: vault, sender: SenderClient(socketPath: settings.pushSocket), privacyFloor: settings.privacyMinimumMode, keepers: keepers)
        logger.info("renew done", metadata: [
            "subscriptions.dead": "\(counts.deadSubscriptions)", "wakeups.sent": "\(counts.wakeups)", "wakeups.refused": "\(counts.wakeupsRefused)",
        ])
        print("renew: \(counts.deadSubscriptions) subscriptions marked not subscribed, \(counts.wakeups) wake-up pushes handed to ens-apns")
    }

    public func syncKeys() throws {
        try recorded("sync-keys") {
            let count = try maintenance.purgeSyncKeys()
            logger.info("sync-keys done", metadata: ["synckeys.purged": "\(count)"])
            print("sync-keys: \(count) expired sync keys erased")
        }
    }

    /// The database gauges /metrics reports, counted once here instead of on every
    /// scrape (`MetricGauges`).
    public func gauges() throws {
        try recorded("gauges") {
            let values = try MetricGauges.refresh(database: database, grace: settings.subscriptionGrace, now: .now())
            logger.info("gauges done", metadata: ["series": "\(values.count)"])
        }
    }

    public func keys(target: Int, threads: Int) throws {
        try recorded("keys") {
            let pool = KeyPool(database: database, vault: Vault(masterKey: try settings.masterKey()))
            let added = try pool.refill(to: target, threads: threads, logger: logger) { TerminalProgress.shared.report("keys generated", $0) }
            let size = try pool.count()
            logger.info("keys done", metadata: ["keys.added": "\(added)", "keys.pool": "\(size)"])
        }
    }
}
