public import ENSConfig
public import MariaDB

// Records sharded by user (docs/scaling.md): the tables of one user's records live in
// the shard its bucket maps to; the tables no user owns live in shard 0 (db.*).
//
// Shard 0 keeps: APITokens, KeyPool, RecordQuota, CronLeases, SenderHosts, MetricGauges
// (the sums over every shard), GraphSigningKeys.
// Each shard keeps its users': EnsSubscriptionInfo, Devices, MailCredentials,
// MailCredentialsFresh, NotificationLog, MailItemsSeen, ProofFailures,
// GraphBlindSubscriptions, and EWSUrlCache (a cache of Autodiscover answers, filled by
// the registrations that shard serves).
// Every shard has the whole schema (`ens-cron migrate` migrates each); the tables a
// shard does not use stay empty.

/// Each shard's connection settings: db.*'s, with the map's servers and schema.
public struct ShardDatabases: Sendable {
    public let map: ShardMap
    private let byShard: [Int: MariaDBConfiguration]

    public init(map: ShardMap, base: MariaDBConfiguration) {
        self.map = map
        var byShard = [0: base]
        for shard in map.shards {
            var settings = base
            switch shard.location {
            case .socket(let path):
                settings.unixSocket = path
                settings.hosts = []
            case .hosts(let endpoints):
                settings.unixSocket = nil
                settings.hosts = endpoints.map { MariaDBConfiguration.Endpoint(host: $0.host, port: $0.port) }
            }
            settings.database = shard.name
            byShard[shard.number] = settings
        }
        self.byShard = byShard
    }

    /// One database: shard 0 alone.
    public static func single(_ settings: MariaDBConfiguration) -> ShardDatabases {
        ShardDatabases(map: .unsharded, base: settings)
    }

    public var shardNumbers: [Int] { map.shardNumbers }

    public func contains(shard: Int) -> Bool { byShard[shard] != nil }

    public func settings(shard: Int) -> MariaDBConfiguration {
        guard let settings = byShard[shard] else { preconditionFailure("shard \(shard) is not in the shard map") }
        return settings
    }
}

extension ENSConfiguration {
    /// The service account's settings for every shard (`db.shard_map`).
    public func serviceShards() throws(ConfigError) -> ShardDatabases {
        ShardDatabases(map: try database.shardMap(), base: try serviceDatabase())
    }

    /// The migration account's settings for every shard.
    public func migrationShards() throws(ConfigError) -> ShardDatabases {
        ShardDatabases(map: try database.shardMap(), base: try migrationDatabase())
    }
}

/// One thread's connections: shard 0's, and each other shard's from the first time the
/// thread needs it (a host reaches every shard; a thread keeps what it opened).
public final class ShardConnections {
    public let shards: ShardDatabases
    /// Shard 0's connection: the tables no user owns.
    public let global: Database
    private var opened: [Int: Database] = [:]

    public init(_ shards: ShardDatabases, global: Database? = nil) {
        self.shards = shards
        self.global = global ?? Databases.connection(shards.settings(shard: 0))
    }

    public func database(shard: Int) -> Database {
        if shard == 0 { return global }
        if let database = opened[shard] { return database }
        let database = Databases.connection(shards.settings(shard: shard))
        opened[shard] = database
        return database
    }

    /// Closes every connection (a CGI request's end, a job's end).
    public func closeAll() {
        global.close()
        for database in opened.values { database.close() }
    }
}

/// Each shard's ids in a range of their own: shard n's per-user tables number their rows
/// from n·10¹² (shard 0 from 1), so a bucket's rows can move to another shard keeping
/// their ids, which callback URLs, sealed credentials and row bindings name.
/// `ens-cron migrate` sets it once per shard, as the migration account.
public enum ShardIDRange {
    /// The tables of a user's rows whose ids MariaDB hands out.
    static let tables = ["EnsSubscriptionInfo", "Devices", "MailCredentialsFresh", "GraphBlindSubscriptions"]
    public static let span: Int64 = 1_000_000_000_000

    /// Moves the next id of each table below its shard's range up to its start (only
    /// when below, so it runs once); returns the tables it moved.
    @discardableResult
    public static func reserve(shard: Int, database: Connection) throws(DatabaseError) -> [String] {
        guard shard > 0 else { return [] }
        let start = Int64(shard) * span
        var moved: [String] = []
        for table in tables {
            let row = try database.queryOne("""
                SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = \(table)
                """)
            let next: Int64? = try row?.decode(Int64?.self) ?? nil
            guard let next, next < start else { continue }
            // Both spliced values are this code's own: a constant table name and a number.
            try database.execute("ALTER TABLE \(unsafe: table) AUTO_INCREMENT = \(unsafe: String(start))")
            moved.append(table)
        }
        return moved
    }
}
