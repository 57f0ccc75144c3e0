import ArgumentParser
import ENSConfig
import ENSMaintenance
import ENSModel
import ENSStore
import ENSVault
import Logging
import POSIX

/// ens-cron: maintenance jobs and administration commands, run to completion.
@main
struct ENSCron: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ens-cron",
        abstract: "ENS maintenance: migrations, API tokens, the token cache, reaping, renewal, sync keys, the key pool.",
        discussion: """
            Cron runs `ens-cron all` every minute, on every host. The shared jobs (reap, renew, \
            sync-keys, keys, gauges) take this host's lock (cron.lock_file) and the cluster's lease in the \
            database (cron.lease_seconds); a run that finds either held logs that it skipped and \
            exits 0. api-keys refreshes this host's token cache on every host. Each job logs one \
            summary line.

            Exit status: 0 on success (or a clean skip), 1 on a configuration or database error, \
            2 on bad usage.
            """,
        version: "ens-cron \(Release.version)",
        subcommands: [All.self, APIKeys.self, Reap.self, Renew.self, SyncKeys.self, Keys.self, Gauges.self, Migrate.self, Token.self, Status.self,
                      Dovecot.self, ConfigReferenceCommand.self]
    )
}

/// Options every subcommand takes.
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: "Config file (default: $ENS_CONFIG, else /etc/ens/ens.conf).")
    var config: String?

    @Option(name: .long, help: .hidden)
    var now: String?

    /// The clock jobs use: the real one, or `--now` (milliseconds since the epoch) in tests.
    var clock: Timestamp {
        now.flatMap(Int64.init).map(Timestamp.init(millisecondsSinceEpoch:)) ?? .now()
    }

    func load(_ command: String) throws -> ENSConfiguration {
        do {
            try CoreDumps.forbid()  // before any secret is read
            let settings = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: config))
            // A malformed shard map stops every command, as it stops the services.
            _ = try settings.database.shardMap()
            LogfmtLogHandler.bootstrap(label: "ens-cron", level: settings.logging.level)
            settings.logDeprecatedKeys(Logger(label: "ens-cron"))
            return settings
        } catch {
            printError("ens-cron \(command): \(error)")
            throw ExitCode(1)
        }
    }
}

/// Runs `body`, turning failures into one clear line on stderr and exit status 1.
func reportingFailures(_ command: String, _ body: () throws -> Void) throws {
    do {
        try body()
    } catch let exit as ExitCode {
        throw exit
    } catch {
        printError("ens-cron \(command): \(error)")
        throw ExitCode(1)
    }
}

struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending SQL migrations (as the migration account), to every shard.")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("migrate")
        try reportingFailures("migrate") {
            // Read before anything is applied: migration 014 needs it to bind the rows
            // already there, and must not be half done for want of it.
            let vault = Vault(masterKey: try settings.secrets.masterKey())
            let shards = try settings.migrationShards()
            // Every shard has the whole schema, shard 0 first; a failure stops before
            // the next shard (run it again once fixed: applied migrations are skipped).
            for shard in shards.shardNumbers {
                let migrator = Migrator(directory: settings.database.migrationsDirectory, settings: shards.settings(shard: shard))
                let applied = try migrator.migrate(then: [
                    RowBindingBackfill.migration: { database in
                        let bound = try RowBindingBackfill(database: database, vault: vault).run()
                        print("bound \(bound.subscriptions) subscription rows and \(bound.boxKeys) box keys to the master key")
                    },
                    RowBindingBackfill.migration021: { database in
                        let bound = try RowBindingBackfill(database: database, vault: vault).runDevicesAndBlindSubscriptions()
                        print("bound \(bound.devices) devices and \(bound.blind) blind subscriptions to the master key")
                    },
                    RowBindingBackfill.migration023: { database in
                        let bound = try RowBindingBackfill(database: database, vault: vault).runCredentialSuppliers()
                        print("bound the suppliers of \(bound.stored) stored and \(bound.fresh) fresh credentials to the master key")
                    },
                ])
                let named = shard == 0 ? "" : "shard \(shard): "
                print(named + (applied.isEmpty ? "schema is up to date" : "applied: \(applied.joined(separator: ", "))"))
                let ranged = try ShardIDRange.reserve(shard: shard, database: migrator.database)
                if !ranged.isEmpty { print("shard \(shard): ids from \(Int64(shard) * ShardIDRange.span) in \(ranged.joined(separator: ", "))") }
            }
        }
    }
}

struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create, revoke and list API tokens.",
        subcommands: [Create.self, Revoke.self, List.self]
    )

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a token and print it once (only its hash is stored).")
        @OptionGroup var options: CommonOptions
        @Option(name: .long, help: "Who the token is for.") var label: String

        func run() throws {
            let settings = try options.load("token create")
            try reportingFailures("token create") {
                let database = Databases.connection(try settings.serviceDatabase())
                let token = try APITokens.create(label: label, database: database)
                try APITokens.writeCache(path: settings.secrets.apiTokenCacheFile, database: database)
                print(token)
            }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke the tokens with this label (or this id).")
        @OptionGroup var options: CommonOptions
        @Argument(help: "Label or numeric id.") var labelOrID: String

        func run() throws {
            let settings = try options.load("token revoke")
            try reportingFailures("token revoke") {
                let database = Databases.connection(try settings.serviceDatabase())
                let count = try APITokens.revoke(labelOrID: labelOrID, database: database)
                try APITokens.writeCache(path: settings.secrets.apiTokenCacheFile, database: database)
                print("revoked \(count) token(s)")
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List tokens: id, label, state. Tokens themselves are never shown.")
        @OptionGroup var options: CommonOptions

        func run() throws {
            let settings = try options.load("token list")
            try reportingFailures("token list") {
                let database = Databases.connection(try settings.serviceDatabase())
                for token in try APITokens.list(database: database) {
                    let state = token.revokedAt.map { "revoked \($0)" } ?? "active"
                    print("\(token.id)\t\(token.label)\tcreated \(token.createdAt)\t\(state)")
                }
            }
        }
    }
}

struct APIKeys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-keys",
        abstract: "Rewrite the responders' API token cache from the database (atomically)."
    )
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("api-keys")
        try reportingFailures("api-keys") { try Jobs(settings: settings, now: options.clock).apiKeys() }
    }
}

struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refill the RSA key pool to keys.pool_size (or --target).")
    @OptionGroup var options: CommonOptions
    @Option(name: .long, help: "Pool size to reach (default: keys.pool_size).") var target: Int?
    @Option(name: .long, help: "Threads generating keys (default: 2).") var threads: Int = 2

    func run() throws {
        let settings = try options.load("keys")
        try reportingFailures("keys") {
            try Jobs(settings: settings, now: options.clock).keys(target: target ?? settings.secrets.keyPoolSize, threads: threads)
        }
    }
}

/// Runs `body` under this host's cron lock (cron.lock_file), so that two runs on one
/// host never overlap; skips cleanly (exit 0) when another run holds it.
func withHostLock(_ settings: ENSConfiguration, _ job: String, _ body: () throws -> Void) throws {
    let fd: Int32?
    do {
        fd = try Files.tryLock(settings.maintenance.lockFile)
    } catch {
        printError("ens-cron \(job): cannot open the lock file \(settings.maintenance.lockFile): \(error)")
        throw ExitCode(1)
    }
    guard let fd else {
        Logger(label: "ens-cron").info("previous run still going; skipped", metadata: ["job": "\(job)"])
        return
    }
    defer { FileDescriptor.close(fd) }
    try body()
}

/// Runs `body` holding the cluster's cron lease (`CronLease`), renewed while it runs and
/// released after; skips cleanly (exit 0) when another host's run holds it. A lease
/// that cannot be claimed (the database is down) fails `jobs` in the status file, as
/// the jobs themselves would have.
func withClusterLease(_ settings: ENSConfiguration, _ job: String, jobs: [String], _ body: () throws -> Void) throws {
    let logger = Logger(label: "ens-cron")
    let database = try settings.serviceDatabase()
    let connection = Databases.connection(database)
    let outcome: CronLease.Outcome
    do {
        outcome = try CronLease.claim("maintenance", holder: "\(ProcessInfoLite.hostName) pid \(ProcessInfoLite.pid)",
                                      duration: settings.maintenance.cronLease, database: connection)
    } catch {
        for name in jobs {
            try? CronJobLog(path: settings.maintenance.cronStatusFile).record(.init(job: name, outcome: "failed", finishedAt: .now(), took: .zero))
        }
        throw error
    }
    switch outcome {
    case .heldElsewhere(let held):
        logger.info("another run holds the cluster's cron lease; skipped", metadata: [
            "job": "\(job)", "lease.holder": "\(held.holder)", "lease.expires": "\(held.expiresAt?.databaseString ?? "-")",
        ])
    case .claimed(let lease):
        let keeper = try CronLeaseKeeper(lease: lease, database: database, onLost: {
            logger.error("cron lease lost to another run while jobs were going (renewal came too late); they may overlap until this run ends",
                         metadata: ["job": "\(job)"])
        }, onError: { error in
            logger.warning("cannot renew the cron lease; trying again", metadata: ["job": "\(job)", "db.error": "\(error)"])
        })
        defer {
            keeper.stop()
            do {
                try lease.release(database: connection)
            } catch {
                logger.warning("cannot release the cron lease; it expires by itself", metadata: ["job": "\(job)", "db.error": "\(error)"])
            }
        }
        try body()
    }
}

/// Both: what each shared job runs under.
func withCronLock(_ settings: ENSConfiguration, _ job: String, _ body: () throws -> Void) throws {
    try withHostLock(settings, job) {
        try reportingFailures(job) { try withClusterLease(settings, job, jobs: [job], body) }
    }
}

struct Reap: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Remove stale and rejected devices, empty records and expired Autodiscover cache rows.")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("reap")
        try withCronLock(settings, "reap") { try Jobs(settings: settings, now: options.clock).reap() }
    }
}

struct Renew: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Renew Graph subscriptions, mark EWS subscriptions without heartbeats (and Graph " +
                                                              "ones ENS may no longer renew) as not subscribed, and wake their devices.")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("renew")
        try withCronLock(settings, "renew") { try Jobs(settings: settings, now: options.clock).renew() }
    }
}

struct SyncKeys: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sync-keys", abstract: "Erase expired background sync keys.")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("sync-keys")
        try withCronLock(settings, "sync-keys") { try Jobs(settings: settings, now: options.clock).syncKeys() }
    }
}

struct Gauges: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Count subscriptions and devices by state for GET /metrics (MetricGauges).")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("gauges")
        try withCronLock(settings, "gauges") { try Jobs(settings: settings, now: options.clock).gauges() }
    }
}

struct All: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Every job in turn: api-keys, reap, renew, sync-keys, keys, gauges (what cron runs).")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("all")
        try withHostLock(settings, "all") {
            try reportingFailures("all") {
                let jobs = try Jobs(settings: settings, now: options.clock)
                try jobs.apiKeys()
                try withClusterLease(settings, "all", jobs: ["reap", "renew", "sync-keys", "keys", "gauges"]) {
                    try jobs.reap()
                    try jobs.renew()
                    try jobs.syncKeys()
                    try jobs.keys(target: settings.secrets.keyPoolSize, threads: 2)
                    try jobs.gauges()
                }
            }
        }
    }
}
