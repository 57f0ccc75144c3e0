import ArgumentParser
import ENSCore
import Logging
import MariaDB
import POSIX

/// ens-cron: maintenance jobs and administration commands, run to completion.
@main
struct ENSCron: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ens-cron",
        abstract: "ENS maintenance: migrations, API tokens and the responders' token cache.",
        discussion: "Exit status: 0 on success, 1 on a configuration or database error, 2 on bad usage.",
        subcommands: [Migrate.self, Token.self, APIKeys.self, Keys.self]
    )
}

/// Options every subcommand takes.
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: "Config file (default: $ENS_CONFIG, else /etc/ens/ens.conf).")
    var config: String?

    func load(_ command: String) throws -> ENSConfiguration {
        do {
            let settings = try ENSConfiguration.load(path: ENSConfiguration.resolvePath(flag: config))
            LogfmtLogHandler.bootstrap(label: "ens-cron", level: settings.logLevel)
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
    static let configuration = CommandConfiguration(abstract: "Apply pending SQL migrations (as the migration account).")
    @OptionGroup var options: CommonOptions

    func run() throws {
        let settings = try options.load("migrate")
        try reportingFailures("migrate") {
            let database = Connection(configuration: try settings.migrationDatabase())
            let applied = try Migrator(directory: settings.migrationsDirectory, database: database).migrate()
            print(applied.isEmpty ? "schema is up to date" : "applied: \(applied.joined(separator: ", "))")
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
                let database = Connection(configuration: try settings.serviceDatabase())
                let token = try APITokens.create(label: label, database: database)
                try APITokens.writeCache(path: settings.apiTokenCacheFile, database: database)
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
                let database = Connection(configuration: try settings.serviceDatabase())
                let count = try APITokens.revoke(labelOrID: labelOrID, database: database)
                try APITokens.writeCache(path: settings.apiTokenCacheFile, database: database)
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
                let database = Connection(configuration: try settings.serviceDatabase())
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
        try reportingFailures("api-keys") {
            let database = Connection(configuration: try settings.serviceDatabase())
            let count = try APITokens.writeCache(path: settings.apiTokenCacheFile, database: database)
            Logger(label: "ens-cron").info("api-keys done", metadata: ["tokens": "\(count)"])
        }
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
            let database = Connection(configuration: try settings.serviceDatabase())
            let pool = KeyPool(database: database, vault: Vault(masterKey: try settings.masterKey()))
            let logger = Logger(label: "ens-cron")
            let added = try pool.refill(to: target ?? settings.keyPoolSize, threads: threads, logger: logger)
            let size = try pool.count()
            logger.info("keys done", metadata: ["keys.added": "\(added)", "keys.pool": "\(size)"])
        }
    }
}
