internal import CMariaDB
#if canImport(Glibc)
import Glibc
#endif

/// One connection to MariaDB, used by one thread at a time.
///
/// Owns the `MYSQL` handle and a cache of prepared statements keyed by SQL text.
/// It connects lazily and, after the server goes away, drops the broken handle so the
/// next call connects afresh: responders recover from a database restart by themselves.
public final class Connection {
    private let configuration: MariaDBConfiguration
    private var handle: UnsafeMutablePointer<MYSQL>?
    private var statements: [String: PreparedStatement] = [:]
    /// Inside `transaction`: a lost connection then means the server rolled back the
    /// work so far, so no statement may be retried on its own.
    private var inTransaction = false

    public init(configuration: MariaDBConfiguration) {
        MariaDBLibrary.initializeOnce()
        self.configuration = configuration
    }

    deinit {
        disconnect()
    }

    public var isConnected: Bool { handle != nil }

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

    /// Connects now if not connected.
    public func connect() throws(MariaDBError) {
        if handle != nil { return }
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
            fresh,
            configuration.unixSocket == nil ? configuration.host : nil,
            configuration.user,
            configuration.password,
            configuration.database,
            UInt32(configuration.port),
            configuration.unixSocket,
            0
        )
        guard connected != nil else {
            let error = MariaDBError.from(connection: fresh, operation: "connect")
            mysql_close(fresh)
            throw error
        }
        handle = fresh
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
    /// A deadlock or lock wait timeout rolls the work back and runs it again (up to four
    /// times, after a short random pause), so callers see conflicts only when they persist.
    /// A connection lost before COMMIT took the whole transaction with it (the server
    /// rolls back): it runs again whole, once, on a new connection. One lost during
    /// COMMIT may or may not have committed, so it is thrown, never run twice. Either way
    /// no statement of the body ever runs outside the transaction. A transaction inside
    /// another joins it.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if inTransaction { return try body() }
        return try retryingConflicts {
            var lostConnections = 0
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
                } catch let error as MariaDBError where error.kind == .connectionLost && !committing && lostConnections == 0 {
                    inTransaction = false
                    lostConnections += 1
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
            if error.kind == .connectionLost { disconnect() }
            throw error
        }
        if let resultSet = mysql_store_result(handle) { mysql_free_result(resultSet) }
    }

    private func run<T>(_ query: Query, _ body: (PreparedStatement) throws(MariaDBError) -> T) throws(MariaDBError) -> T {
        let wasConnected = handle != nil
        do {
            return try runOnce(query, body)
        } catch where wasConnected && error.isStaleConnection && !inTransaction {
            // The server restarted or dropped us while the connection sat idle. "Server
            // gone" is reported before the statement reaches the server, so nothing ran:
            // reconnect and try once more. (Not inside a transaction: there the server
            // dropped the earlier statements too, and `transaction` decides.)
            return try runOnce(query, body)
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
            if error.kind == .connectionLost { disconnect() }
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
}

extension Connection: SQLDatabase {}

extension SQLDatabase {
    /// Runs `body` again when the server reports a deadlock or lock wait timeout.
    @discardableResult
    public func retryingConflicts<T>(_ body: () throws -> T) throws -> T {
        var attempt = 0
        while true {
            do {
                return try body()
            } catch let error as MariaDBError where error.kind == .conflict && attempt < 4 {
                attempt += 1
                usleep(UInt32.random(in: 1000...(5000 * UInt32(attempt))))
            }
        }
    }
}
