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
///
/// With a shard map, the jobs about users' records (reap, renew, sync-keys, the gauges'
/// counts) run once per shard, shard 0 first; the others (api-keys, keys, the lost-sender
/// check) once, on shard 0, which keeps the tables no user owns.
public struct Jobs {
    public let settings: ENSConfiguration
    /// Shard 0's connection.
    let database: Database
    /// One per shard, shard 0 first.
    let maintenances: [Maintenance]
    let logger = Logger(label: "ens-cron")

    public init(settings: ENSConfiguration, now: Timestamp) throws {
        self.settings = settings
        let shards = ShardConnections(try settings.serviceShards())
        database = shards.global
        maintenances = shards.shards.shardNumbers.map { shard in
            Maintenance(database: shards.database(shard: shard), shard: shard, policy: settings.maintenancePolicy, now: now,
                        logger: Logger(label: "ens-cron"), progress: { what, rows in TerminalProgress.shared.report(what, rows) })
        }
    }

    /// How a job's summary names the shard it ran on: as before sharding for shard 0.
    private func named(_ job: String, _ maintenance: Maintenance) -> String {
        maintenance.shard == 0 ? job : "\(job) (shard \(maintenance.shard))"
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
                try CronJobLog(path: settings.maintenance.cronStatusFile).record(.init(job: job, outcome: outcome, finishedAt: .now(), took: took))
            } catch {
                logger.warning("cannot record the job's outcome for ens-cron status", metadata: ["job": "\(job)", "error": "\(error)"])
            }
        }
        try body()
        outcome = "ok"
    }

    public func apiKeys() throws {
        try recorded("api-keys") {
            let count = try APITokens.writeCache(path: settings.secrets.apiTokenCacheFile, database: database)
            logger.info("api-keys done", metadata: ["tokens": "\(count)"])
        }
    }

    public func reap() throws {
        try recorded("reap") { try reapNow() }
    }

    private func reapNow() throws {
        maintenances[0].warnAboutLostSenders()
        for maintenance in maintenances { try reapNow(maintenance) }
    }

    private func reapNow(_ maintenance: Maintenance) throws {
        let counts = try maintenance.reap(binding: RowBinding(vault: Vault(masterKey: try settings.secrets.masterKey())))
        logger.info("reap done", metadata: [
            "shard": "\(maintenance.shard)",
            "devices.stale": "\(counts.staleDevices)", "devices.disabled": "\(counts.disabledDevices)",
            "records.empty": "\(counts.emptyRecords)", "ewsurlcache.expired": "\(counts.expiredURLCache)",
            "events.forgotten": "\(counts.forgottenEvents)", "notifications.content_erased": "\(counts.expiredContent)",
            "notifications.removed": "\(counts.oldNotifications)", "credentials.abandoned": "\(counts.abandonedCredentials)",
            "proof_failures.expired": "\(counts.expiredProofFailures)", "sealed_values.expired": "\(counts.expiredSealedValues)",
            "subscriptions.ended_with_supplier": "\(counts.subscriptionsEndedWithSupplier)",
        ])
        print("\(named("reap", maintenance)): \(counts.staleDevices) stale devices, \(counts.disabledDevices) disabled devices, " +
              "\(counts.emptyRecords) empty records, \(counts.expiredURLCache) expired URL cache rows removed; \(counts.expiredContent) secure " +
              "contents erased, \(counts.oldNotifications) notification log entries removed; \(counts.abandonedCredentials) abandoned " +
              "registrations' credentials erased; \(counts.expiredProofFailures) expired proof failure counts removed; " +
              "\(counts.expiredSealedValues) expired single-use marks removed; \(counts.subscriptionsEndedWithSupplier) subscriptions ended with " +
              "the device that supplied their credentials")
    }

    public func renew() throws {
        try recorded("renew") { try renewNow() }
    }

    private func renewNow() throws {
        let vault = Vault(masterKey: try settings.secrets.masterKey())
        let keepers = try MailBackendTable.keepers(settings, vault: vault)
        for maintenance in maintenances {
            let counts = try maintenance.renew(vault: vault, sender: SenderClient(socketPath: settings.push.socket),
                                               privacyFloor: settings.privacy.minimumMode,
                                               keepers: keepers)
            logger.info("renew done", metadata: [
                "shard": "\(maintenance.shard)",
                "subscriptions.dead": "\(counts.deadSubscriptions)",
                "wakeups.sent": "\(counts.wakeups)", "wakeups.refused": "\(counts.wakeupsRefused)",
            ])
            print("\(named("renew", maintenance)): \(counts.deadSubscriptions) subscriptions marked not subscribed, \(counts.wakeups) wake-up " +
                  "pushes handed to ens-sender")
        }
    }

    public func syncKeys() throws {
        try recorded("sync-keys") {
            for maintenance in maintenances {
                let count = try maintenance.purgeSyncKeys()
                logger.info("sync-keys done", metadata: ["shard": "\(maintenance.shard)", "synckeys.purged": "\(count)"])
                print("\(named("sync-keys", maintenance)): \(count) expired sync keys erased")
            }
        }
    }

    /// The database gauges /metrics reports, counted once here instead of on every
    /// scrape (`MetricGauges`).
    public func gauges() throws {
        try recorded("gauges") {
            let values = try MetricGauges.refresh(counting: maintenances.map(\.database), into: database,
                                                  grace: settings.deviceAPI.subscriptionGrace, now: .now())
            logger.info("gauges done", metadata: ["series": "\(values.count)"])
        }
    }

    public func keys(target: Int, threads: Int) throws {
        try recorded("keys") {
            let pool = KeyPool(database: database, vault: Vault(masterKey: try settings.secrets.masterKey()))
            let added = try pool.refill(to: target, threads: threads, logger: logger) { TerminalProgress.shared.report("keys generated", $0) }
            let size = try pool.count()
            logger.info("keys done", metadata: ["keys.added": "\(added)", "keys.pool": "\(size)"])
        }
    }
}
