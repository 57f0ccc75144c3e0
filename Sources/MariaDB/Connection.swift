internal import CMariaDB
#if canImport(Glibc)
import Glibc
#endif

/// One connection to MariaDB, used by one thread at a time.
///
/// Owns the `MYSQL` handle and a cache of prepared statements keyed by SQL text.
/// It connects lazily and, after the server goes away, drops the broken handle so the
/// next call connects afresh: responders recover from a database restart by themselves.
/// Given several servers (the nodes of a Galera cluster), it moves to the next one when
/// its server goes away or its node stops being usable; Connector/C's own host list only
/// helps when a server cannot be reached at all, and never once connected.
public final class Connection {
    private let configuration: MariaDBConfiguration
    private let endpoints: [MariaDBConfiguration.Endpoint]
    private var handle: UnsafeMutablePointer<MYSQL>?
    private var statements: [String: PreparedStatement] = [:]
    /// Inside `transaction`: a lost connection then means the server rolled back the
    /// work so far, so no statement may be retried on its own.
    private var inTransaction = false
    /// Which of `endpoints` to try first: the one in use, or after a failure the next.
    private var endpointIndex = 0
    /// Whether the server is a Galera node (`wsrep_on`), read when connecting.
    public private(set) var isGaleraNode = false
    /// Inside `nodeProblem`: its own statements' failures are not examined again.
    private var checkingNode = false

    public init(configuration: MariaDBConfiguration) {
        MariaDBLibrary.initializeOnce()
        self.configuration = configuration
        self.endpoints = configuration.endpoints
    }

    deinit {
        disconnect()
    }

    public var isConnected: Bool { handle != nil }

    /// The server this connection is on: nil over a Unix socket or when not connected.
    public var server: MariaDBConfiguration.Endpoint? {
        handle != nil && configuration.unixSocket == nil ? endpoints[endpointIndex] : nil
    }

    /// The TLS cipher of the connection, nil when it is not encrypted (or not open).
    public var tlsCipher: String? {
        guard let handle, let cipher = mysql_get_ssl_cipher(handle) else { return nil }
        return String(cString: cipher)
    }

    /// Closes the connection and forgets its prepared statements.
    public func disconnect() {
        statements.removeAll()  // statements close before the connection they belong to
        if let handle {
            mysql_close(handle)
            self.handle = nil
        }
    }

    /// Connects now if not connected: over the socket, or to the first of the servers
    /// that accepts, starting with the one last used.
    public func connect() throws(MariaDBError) {
        if handle != nil { return }
        if configuration.unixSocket != nil {
            handle = try open(host: nil, port: 0)
        } else {
            var failure: MariaDBError?
            for offset in endpoints.indices {
                let index = (endpointIndex + offset) % endpoints.count
                do {
                    handle = try open(host: endpoints[index].host, port: endpoints[index].port)
                    endpointIndex = index
                    break
                } catch {
                    failure = error
                }
            }
            guard handle != nil else { throw failure ?? MariaDBError.misuse("no database server configured") }
        }
        try prepareSession()
    }

    private func open(host: String?, port: Int) throws(MariaDBError) -> UnsafeMutablePointer<MYSQL> {
        guard let fresh = mysql_init(nil) else {
            throw MariaDBError.misuse("mysql_init returned no handle (out of memory)")
        }
        var connectTimeout = UInt32(clamping: max(1, configuration.connectTimeout.components.seconds))
        var ioTimeout = UInt32(clamping: max(1, configuration.readWriteTimeout.components.seconds))
        mysql_options(fresh, MYSQL_OPT_CONNECT_TIMEOUT, &connectTimeout)
        mysql_options(fresh, MYSQL_OPT_READ_TIMEOUT, &ioTimeout)
        mysql_options(fresh, MYSQL_OPT_WRITE_TIMEOUT, &ioTimeout)
        mysql_options(fresh, MYSQL_SET_CHARSET_NAME, "utf8mb4")
        // Every DATETIME ENS stores or compares is UTC, whatever the server's zone.
        mysql_options(fresh, MYSQL_INIT_COMMAND, "SET time_zone = '+00:00'")
        if let tls = configuration.tls {
            // Required, and verified: without MYSQL_OPT_SSL_VERIFY_SERVER_CERT Connector/C
            // would encrypt to whoever answers; without ENFORCE a server that offers no TLS
            // would be talked to in clear.
            var yes: my_bool = 1
            mysql_options(fresh, MYSQL_OPT_SSL_ENFORCE, &yes)
            mysql_options(fresh, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &yes)
            mysql_options(fresh, MYSQL_OPT_SSL_CA, tls.caFile)
            if let certificate = tls.certificateFile { mysql_options(fresh, MYSQL_OPT_SSL_CERT, certificate) }
            if let key = tls.keyFile { mysql_options(fresh, MYSQL_OPT_SSL_KEY, key) }
        }
        let connected = mysql_real_connect(
            fresh, host, configuration.user, configuration.password, configuration.database,
            UInt32(port), configuration.unixSocket, 0
        )
        guard connected != nil else {
            let error = MariaDBError.from(connection: fresh, operation: "connect")
            mysql_close(fresh)
            throw error
        }
        return fresh
    }

    /// On a Galera node, every read waits until the node has applied what the cluster
    /// committed before it (`wsrep_sync_wait = 1`): a device registers through one host
    /// and checks in through another, whose node may otherwise not have its row yet. A
    /// server built without Galera has no `wsrep_on` and is left as it is.
    private func prepareSession() throws(MariaDBError) {
        isGaleraNode = false
        let wsrepOn: Int?
        do {
            wsrepOn = try runOnce("SELECT @@wsrep_on") { statement throws(MariaDBError) in try statement.fetchAll() }
                .first?.decode(Int.self)
        } catch where error.kind == .other {
            wsrepOn = nil
        }
        guard wsrepOn == 1 else { return }
        isGaleraNode = true
        _ = try runOnce("SET SESSION wsrep_sync_wait = 1") { statement throws(MariaDBError) in statement.executeResult() }
    }

    /// Drops the connection; the next one starts with the next server.
    private func abandonServer() {
        disconnect()
        if configuration.unixSocket == nil { endpointIndex = (endpointIndex + 1) % endpoints.count }
    }

    /// Whether this connection's server can take work. A plain server must answer
    /// `SELECT 1`. A Galera node must be a synced member of the Primary component: a node
    /// cut off from the others still answers `SELECT 1` but refuses every table. A node
    /// that is not ready is left for the next server, so this fails only when none of
    /// them is usable.
    public func checkHealth() throws(MariaDBError) {
        var tried = 1
        while true {
            do {
                return try checkServer()
            } catch where error.kind == .nodeUnavailable && tried < endpoints.count {
                tried += 1
            }
        }
    }

    private func checkServer() throws(MariaDBError) {
        try connect()
        // Through `run`, like any statement: a connection the server dropped while it
        // sat idle (a restart) is reopened, not reported as an outage.
        guard isGaleraNode else {
            _ = try query("SELECT 1")
            return
        }
        if let problem = try nodeProblem() {
            abandonServer()
            throw MariaDBError.nodeNotReady(problem)
        }
    }

    /// What keeps this Galera node from taking work; nil when it is a synced member of
    /// the Primary component. Read without waiting for causality: on a node cut off from
    /// its cluster a causal read does not answer, it fails with a lock wait timeout.
    private func nodeProblem() throws(MariaDBError) -> String? {
        checkingNode = true
        defer {
            checkingNode = false
            if isConnected { _ = try? execute("SET SESSION wsrep_sync_wait = 1") }
        }
        try execute("SET SESSION wsrep_sync_wait = 0")
        let rows = try query("""
            SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
            WHERE VARIABLE_NAME IN ('WSREP_READY', 'WSREP_LOCAL_STATE', 'WSREP_CLUSTER_STATUS')
            """)
        var status: [String: String] = [:]
        for row in rows {
            let (name, value) = try row.decode(String.self, String.self)
            status[name.uppercased()] = value
        }
        let (ready, state, cluster) = (status["WSREP_READY"] ?? "?", status["WSREP_LOCAL_STATE"] ?? "?", status["WSREP_CLUSTER_STATUS"] ?? "?")
        return ready == "ON" && state == "4" && cluster == "Primary" ? nil : "wsrep_ready \(ready), local state \(state), cluster \(cluster)"
    }

    /// Runs a statement that returns rows.
    public func query(_ query: Query) throws(MariaDBError) -> [Row] {
        try run(query) { statement throws(MariaDBError) in try statement.fetchAll() }
    }

    /// Runs a statement that returns at most one row.
    public func queryOne(_ query: Query) throws(MariaDBError) -> Row? {
        try self.query(query).first
    }

    /// Runs a statement that changes data.
    @discardableResult
    public func execute(_ query: Query) throws(MariaDBError) -> ExecuteResult {
        try run(query) { statement throws(MariaDBError) in statement.executeResult() }
    }

    /// Runs `body` inside a transaction; commits if it returns, rolls back if it throws.
    /// A deadlock, lock wait timeout or (Galera) certification conflict rolls the work
    /// back and runs it again (up to four times, after a short random pause), so callers
    /// see conflicts only when they persist. A connection lost, or a node found unusable,
    /// before COMMIT took the whole transaction with it (the server rolls back): it runs
    /// again whole on a new connection, to the next server when there are several. One
    /// lost during COMMIT may or may not have committed, so it is thrown, never run twice.
    /// Either way no statement of the body ever runs outside the transaction. A
    /// transaction inside another joins it.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if inTransaction { return try body() }
        return try retryingConflicts {
            var reruns = 0
            while true {
                try execute("START TRANSACTION")
                inTransaction = true
                var committing = false
                do {
                    let result = try body()
                    committing = true
                    try execute("COMMIT")
                    inTransaction = false
                    return result
                } catch let error as MariaDBError where error.abandonsServer && !committing && reruns < endpoints.count {
                    inTransaction = false
                    reruns += 1
                } catch {
                    inTransaction = false
                    if isConnected { _ = try? execute("ROLLBACK") }
                    throw error
                }
            }
        }
    }

    /// Runs SQL text that takes no parameters, through the text protocol. Used for
    /// migrations (DDL); never for statements that carry values.
    public func executeScript(unsafeSQL sql: String) throws(MariaDBError) {
        try connect()
        guard let handle else { throw MariaDBError.misuse("not connected") }
        let result = sql.withCString { mysql_real_query(handle, $0, UInt(sql.utf8.count)) }
        if result != 0 {
            let error = MariaDBError.from(connection: handle, operation: "query")
            if error.abandonsServer { abandonServer() }
            throw error
        }
        if let resultSet = mysql_store_result(handle) { mysql_free_result(resultSet) }
    }

    private func run<T>(_ query: Query, _ body: (PreparedStatement) throws(MariaDBError) -> T) throws(MariaDBError) -> T {
        var reruns = 0
        while true {
            let wasConnected = handle != nil
            do {
                return try runOnce(query, body)
            } catch where !inTransaction && reruns < max(4, endpoints.count) && Self.certainlyNotApplied(error, wasConnected: wasConnected) {
                // Inside a transaction the server dropped the earlier statements too, and
                // `transaction` decides.
                reruns += 1
                if error.kind == .conflict { pauseBeforeRerun(reruns) }
            }
        }
    }

    /// Whether a lone statement (autocommit) that failed this way certainly did not take
    /// effect, so that running it again is safe:
    /// - "server gone" on a connection that sat idle (the server restarted or dropped us)
    ///   is reported before the statement reaches the server;
    /// - a Galera node that is not ready refuses statements without running them, and
    ///   the rerun goes to the next server;
    /// - a deadlock or certification conflict rolled the statement back (Galera's own
    ///   single retry of autocommit statements does not always suffice). A lock wait
    ///   timeout is left to the caller, who may have set it short in order to give up.
    /// A connection lost mid-statement is not: the statement may have been applied.
    private static func certainlyNotApplied(_ error: MariaDBError, wasConnected: Bool) -> Bool {
        switch error.kind {
        case .nodeUnavailable: true
        case .conflict: error.isDeadlock
        case .connectionLost: wasConnected && error.isStaleConnection
        default: false
        }
    }

    private func runOnce<T>(_ query: Query, _ body: (PreparedStatement) throws(MariaDBError) -> T) throws(MariaDBError) -> T {
        try connect()
        guard let handle else { throw MariaDBError.misuse("not connected") }
        do {
            let statement: PreparedStatement
            if let cached = statements[query.sql] {
                statement = cached
            } else {
                statement = try PreparedStatement(connection: handle, sql: query.sql)
                statements[query.sql] = statement
            }
            try statement.execute(bindings: query.bindings)
            return try body(statement)
        } catch {
            if error.abandonsServer {
                abandonServer()
                throw error
            }
            // A Galera node cut off from its cluster answers reads (which wait for
            // causality) with a lock wait timeout, not 1047: when its state confirms
            // it, the node is left like one that refuses work, and the statement (which
            // did not run) goes to the next server.
            if isGaleraNode && error.isLockWaitTimeout && !checkingNode {
                let problem: String?
                do {
                    problem = try nodeProblem()
                } catch {
                    problem = "state unreadable (error \(error.code))"
                }
                if let problem {
                    abandonServer()
                    throw MariaDBError.nodeNotReady(problem)
                }
            }
            throw error
        }
    }
}

/// Calls `mysql_library_init` exactly once per process, before any thread connects
/// (the client library is not thread-safe until it has been initialised).
enum MariaDBLibrary {
    static let initialized: Bool = cmariadb_library_init() == 0

    static func initializeOnce() {
        _ = initialized
    }
}

/// What ENS's stores need of a database: prepared statements and transactions, with
/// `Connection`'s guarantees (a transaction is retried whole or fails whole). A
/// `Connection` is the one ENS runs on; tests put one behind a wrapper that fails on cue.
public protocol SQLDatabase: AnyObject {
    func query(_ query: Query) throws(MariaDBError) -> [Row]
    func queryOne(_ query: Query) throws(MariaDBError) -> Row?
    @discardableResult
    func execute(_ query: Query) throws(MariaDBError) -> ExecuteResult
    func transaction<T>(_ body: () throws -> T) throws -> T
    /// Throws unless the database can take work now (`Connection.checkHealth`).
    func checkHealth() throws(MariaDBError)
}

extension Connection: SQLDatabase {}

extension SQLDatabase {
    public func checkHealth() throws(MariaDBError) {
        _ = try query("SELECT 1")
    }

    /// Runs `body` again when the server reports a deadlock, lock wait timeout or
    /// certification conflict.
    @discardableResult
    public func retryingConflicts<T>(_ body: () throws -> T) throws -> T {
        var attempt = 0
        while true {
            do {
                return try body()
            } catch let error as MariaDBError where error.kind == .conflict && attempt < 4 {
                attempt += 1
                pauseBeforeRerun(attempt)
            }
        }
    }
}

/// A short random pause, longer with each attempt, so that two writers that conflicted
/// do not meet again at once.
func pauseBeforeRerun(_ attempt: Int) {
    usleep(UInt32.random(in: 1000...(5000 * UInt32(clamping: attempt))))
}
