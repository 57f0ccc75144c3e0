public import ENSConfig
public import ENSMetrics
public import ENSModel
public import ENSStore
public import ENSVault
public import SenderWire
public import Logging
internal import POSIX

/// What one responder thread owns: its database connections and its cached health state.
/// Handlers get the context of the thread they run on; nothing in it is shared.
///
/// `database` is the shard of the user the request is about (the dispatcher sets it,
/// once, before the handler runs: `route(toBucket:)`); `globalDatabase` is shard 0's,
/// for the tables no user owns (the key pool, the record quota).
public final class RequestContext {
    public private(set) var settings: ENSConfiguration
    /// Where a reload leaves new settings (nil: these never change).
    private let live: LiveSettings?
    private var liveVersion = 0
    public let services: SharedServices
    /// The request's shard.
    public private(set) var database: Database
    /// Shard 0: the tables no user owns.
    public let globalDatabase: Database
    /// This thread's connection to each shard it has needed (nil: one database).
    private let shards: ShardConnections?
    /// The request's shard number (0 without a map, or for a request about no user).
    public private(set) var shard = 0
    /// Whether the request's bucket is being moved (`freeze` in the map): answered 503.
    public private(set) var bucketIsFrozen = false
    public var logger: Logger
    /// This thread's request counters (nil: metrics off).
    public let requestCounters: RequestCounters?

    private var lastHealthCheck: UInt64 = 0
    private var lastHealthy = false
    private var lastOutageLog: UInt64 = 0
    private var outageRequestsSinceLog = 0
    /// What the mail backends keep on this thread (their clients, each one libcurl
    /// handle), one value per type (`threadState(_:make:)`).
    private var threadStates: [ObjectIdentifier: AnyObject] = [:]
    /// Work a handler left for after its answer has gone to the web server.
    private var afterResponse: [() throws -> Void] = []

    public convenience init(settings: ENSConfiguration, services: SharedServices, database: Database, logger: Logger,
                            requestCounters: RequestCounters? = nil, live: LiveSettings? = nil) {
        self.init(settings: settings, services: services, database: database, logger: logger, shards: nil,
                  requestCounters: requestCounters, live: live)
    }

    /// A thread's context over every shard of `shards` (shard 0 until a request is routed).
    public convenience init(settings: ENSConfiguration, services: SharedServices, shards: ShardConnections, logger: Logger,
                            requestCounters: RequestCounters? = nil, live: LiveSettings? = nil) {
        self.init(settings: settings, services: services, database: shards.global, logger: logger, shards: shards,
                  requestCounters: requestCounters, live: live)
    }

    private init(settings: ENSConfiguration, services: SharedServices, database: Database, logger: Logger, shards: ShardConnections?,
                 requestCounters: RequestCounters?, live: LiveSettings?) {
        self.settings = live?.settings ?? settings
        self.live = live
        self.liveVersion = live?.version ?? 0
        self.services = services
        self.database = database
        self.globalDatabase = database
        self.shards = shards
        self.logger = logger
        self.requestCounters = requestCounters
    }

    /// Points `database` at the shard of `bucket` (nil: a request about no user, or a
    /// callback URL made before sharding: shard 0). The dispatcher calls it once per
    /// request, before the handler.
    public func route(toBucket bucket: Int?) {
        guard let shards else { return }
        shard = bucket.map(shards.shards.map.shard(ofBucket:)) ?? 0
        bucketIsFrozen = bucket.map(shards.shards.map.isFrozen(bucket:)) ?? false
        database = shards.database(shard: shard)
    }

    /// Whether there is a shard map (`db.shard_map`), even one giving every bucket to
    /// shard 0; without one, every request is shard 0's and `route(toBucket:)` changes
    /// nothing.
    public var isSharded: Bool { shards?.shards.map.isConfigured ?? false }

    /// Whether new callback URLs name their user's bucket: with a shard map (even one
    /// giving every bucket to shard 0), so a later move needs no new URLs.
    public var bucketsInURLs: Bool { shards?.shards.map.isConfigured ?? false }

    /// The bucket a new callback URL for `userID`'s record names; nil: the forms made
    /// before sharding (no map).
    public func urlBucket(userID: String) -> Int? {
        bucketsInURLs ? ShardMap.bucket(ofUserID: userID) : nil
    }

    /// The shard a spooled push names: nil for shard 0, so a push of a host without a
    /// map is written as before.
    public var pushShard: Int? { shard == 0 ? nil : shard }

    /// Leaves `work` for after the answer: it runs on this thread once the web server
    /// has the response (Worker, CGIResponder), so a caller such as Graph, which waits
    /// at most 3 s, is not kept waiting for it. Work that must happen once in the
    /// cluster claims it in the database itself.
    public func afterTheAnswer(_ work: @escaping () throws -> Void) {
        afterResponse.append(work)
    }

    /// Runs (and forgets) the work left by the last request; a failure is logged.
    public func runWorkAfterTheAnswer() {
        let work = afterResponse
        afterResponse.removeAll()
        for item in work {
            do {
                try item()
            } catch {
                logger.error("work after the answer failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Takes over what a reload changed, between requests (never during one).
    public func refreshSettings() {
        guard let live, live.version != liveVersion else { return }
        liveVersion = live.version
        settings = live.settings
    }

    /// The notifications made for devices, on this thread's connection (docs/privacy.md).
    public var notificationLog: NotificationLog {
        NotificationLog(database: database, vault: services.vault)
    }

    /// Whether this thread can use the database (a Galera node must be synced and in the
    /// Primary component: `Connection.checkHealth`), re-checked at most once per
    /// `health.cache_ms`, so /alive under load does not hammer MariaDB.
    public func databaseIsHealthy() -> Bool {
        let now = MonotonicClock.milliseconds()
        if lastHealthCheck != 0 && now &- lastHealthCheck < UInt64(settings.pool.healthCache.wholeMilliseconds) {
            return lastHealthy
        }
        do {
            try database.checkReadiness()
            if !lastHealthy && lastHealthCheck != 0 { logger.info("database reachable again") }
            lastHealthy = true
        } catch {
            if lastHealthy || lastHealthCheck == 0 {
                logger.warning("database unreachable", metadata: ["db.error": "\(error)"])
            }
            lastHealthy = false
        }
        lastHealthCheck = now
        return lastHealthy
    }

    /// Logs a request that failed because MariaDB is gone, at most once per 10 s per
    /// thread with a count of the others: an outage under load must not flood the log.
    public func noteDatabaseUnavailable(_ error: any Error) {
        outageRequestsSinceLog += 1
        let now = MonotonicClock.milliseconds()
        guard lastOutageLog == 0 || now &- lastOutageLog >= 10_000 else { return }
        logger.warning("database unavailable during request", metadata: [
            "db.error": "\(error)", "requests.failed": "\(outageRequestsSinceLog)",
        ])
        lastOutageLog = now
        outageRequestsSinceLog = 0
    }

    /// This thread's `State` (a backend's client, kept alive between requests), made by
    /// `make` the first time a handler asks for it. Each backend keeps its own types
    /// here, so the context names no backend.
    public func threadState<State: AnyObject>(_ type: State.Type, make: () throws -> State) rethrows -> State {
        let key = ObjectIdentifier(type)
        if let state = threadStates[key] { return unsafeDowncast(state, to: State.self) }
        let state = try make()
        threadStates[key] = state
        return state
    }

    /// Forgets the cached health state (after a query failed with a lost connection).
    public func invalidateHealth() {
        lastHealthCheck = 0
        lastHealthy = false
    }
}

/// Process-wide services shared by all responder threads (thread-safe by construction).
public final class SharedServices: Sendable {
    public let vault: Vault
    public let apiTokens: APITokenSet
    public let privateKeys: PrivateKeyCache
    public let liveness: LivenessRecorder
    /// What the mail backends share across the process (their registrars, Graph's
    /// applications and tokens), by type; each backend's folder reads its own.
    public let backends: BackendServices
    /// Threads of this process doing a registration's Exchange work at once
    /// (exchange.max_concurrent_registrations), and held more than a second by a
    /// callback's lookups (exchange.max_slow_callbacks).
    public let registrationGate: ConcurrencyGate
    public let callbackGate: ConcurrencyGate
    /// The bearer token GET /metrics requires (metrics.token_file); nil: /metrics is off.
    public let metricsToken: String?
    /// The connections to ens-sender this process keeps between callbacks' hand-offs.
    public let senderConnections: SenderConnections

    public init(vault: Vault, apiTokens: APITokenSet, privateKeys: PrivateKeyCache, liveness: LivenessRecorder, backends: BackendServices,
                registrationGate: ConcurrencyGate = ConcurrencyGate(.concurrent(1)),
                callbackGate: ConcurrencyGate = ConcurrencyGate(.slow(2, afterMilliseconds: 1000)), metricsToken: String? = nil,
                senderConnections: SenderConnections = SenderConnections()) {
        self.vault = vault
        self.apiTokens = apiTokens
        self.privateKeys = privateKeys
        self.liveness = liveness
        self.backends = backends
        self.registrationGate = registrationGate
        self.callbackGate = callbackGate
        self.metricsToken = metricsToken
        self.senderConnections = senderConnections
    }
}

/// Values the mail backends share across a process, one per type, set once when the
/// process starts.
public struct BackendServices: Sendable {
    private var byType: [ObjectIdentifier: any Sendable] = [:]

    public init() {}

    public subscript<Service: Sendable>(_ type: Service.Type) -> Service? {
        get {
            guard let value = byType[ObjectIdentifier(type)] else { return nil }
            guard let service = value as? Service else { preconditionFailure("BackendServices: \(type) holds another type") }
            return service
        }
        set { byType[ObjectIdentifier(type)] = newValue }
    }
}
