internal import CMariaDB

/// A MariaDB failure, translated in one place from `mysql_errno`/`mysql_sqlstate`.
///
/// `description` is safe to log: it carries the server's error code and class but never
/// the statement's bound values. The server's own message can quote values, so it is
/// only in `debugDescription`, which nothing in ENS logs.
public struct MariaDBError: Error, CustomStringConvertible, CustomDebugStringConvertible, Sendable {
    public enum Kind: Sendable, Equatable {
        /// The server cannot be reached or the connection broke: retry later.
        case connectionLost
        /// The server answers but its Galera node may not be used: it is not a synced
        /// member of the Primary component (1047, "WSREP has not yet prepared node for
        /// application use"). The statement did not run; another node may take it.
        case nodeUnavailable
        /// A unique or primary key already holds this value.
        case duplicateKey
        /// The account lacks a privilege (the service account has no DDL rights).
        case accessDenied
        /// A deadlock or lock wait timeout, or (Galera) a certification conflict with a
        /// transaction committed on another node: the transaction was rolled back and can
        /// be run again.
        case conflict
        /// Anything else the server or the client library reported.
        case other
        /// The caller used the wrapper wrongly (e.g. read a column as the wrong type).
        case misuse
        /// A stored value the caller cannot use although its column read fine: a sealed
        /// value that does not open (a row altered or moved, another master key), or one
        /// it could not seal for writing.
        case invalidValue
    }

    public let kind: Kind
    public let code: UInt32
    public let sqlState: String
    public let operation: String
    private let serverMessage: String

    init(kind: Kind, code: UInt32, sqlState: String, operation: String, serverMessage: String) {
        self.kind = kind
        self.code = code
        self.sqlState = sqlState
        self.operation = operation
        self.serverMessage = serverMessage
    }

    /// A column or call used the wrong way (also for decoders outside this module).
    public static func misuse(_ what: String) -> MariaDBError {
        MariaDBError(kind: .misuse, code: 0, sqlState: "HY000", operation: what, serverMessage: what)
    }

    /// A stored value that is not usable (`Kind.invalidValue`); `what` names the value,
    /// never holds it.
    public static func invalidValue(_ what: String) -> MariaDBError {
        MariaDBError(kind: .invalidValue, code: 0, sqlState: "HY000", operation: what, serverMessage: what)
    }

    /// The connection broke during `operation`: what a stand-in for a connection
    /// (a test's fault injector) throws to act out a server that went away.
    public static func connectionLost(during operation: String) -> MariaDBError {
        MariaDBError(kind: .connectionLost, code: 2013, sqlState: "HY000", operation: operation,
                     serverMessage: "Lost connection to server during query")
    }

    /// A row the caller meant to claim by writing it was gone when written (another
    /// session, on this node or another Galera node, took it first): a conflict, so the
    /// transaction runs again.
    public static func claimLost(_ what: String) -> MariaDBError {
        MariaDBError(kind: .conflict, code: UInt32(ER_LOCK_DEADLOCK), sqlState: "40001",
                     operation: what, serverMessage: "claim lost to another session")
    }

    /// A Galera node found not ready by the health check (wsrep status), reported the
    /// way the server itself refuses statements on such a node.
    static func nodeNotReady(_ state: String) -> MariaDBError {
        MariaDBError(kind: .nodeUnavailable, code: UInt32(ER_UNKNOWN_COM_ERROR), sqlState: "08S01", operation: "health check",
                     serverMessage: "Galera node not ready: \(state)")
    }

    /// Reads the error state of a connection.
    static func from(connection: UnsafeMutablePointer<MYSQL>, operation: String) -> MariaDBError {
        let code = mysql_errno(connection)
        return MariaDBError(
            kind: classify(code),
            code: code,
            sqlState: String(cString: mysql_sqlstate(connection)),
            operation: operation,
            serverMessage: String(cString: mysql_error(connection))
        )
    }

    /// Reads the error state of a prepared statement.
    static func from(statement: UnsafeMutablePointer<MYSQL_STMT>, operation: String) -> MariaDBError {
        let code = mysql_stmt_errno(statement)
        return MariaDBError(
            kind: classify(code),
            code: code,
            sqlState: String(cString: mysql_stmt_sqlstate(statement)),
            operation: operation,
            serverMessage: String(cString: mysql_stmt_error(statement))
        )
    }

    static func classify(_ code: UInt32) -> Kind {
        switch Int32(code) {
        case CR_SERVER_GONE_ERROR, CR_SERVER_LOST, CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR,
             CR_SERVER_LOST_EXTENDED, ER_CONNECTION_KILLED, ER_SERVER_SHUTDOWN, CR_COMMANDS_OUT_OF_SYNC, CR_UNKNOWN_HOST,
             // Galera: the node lost the Primary component while replicating the
             // statement or the commit, whose outcome is therefore unknown.
             ER_ERROR_DURING_COMMIT:
            .connectionLost
        case ER_UNKNOWN_COM_ERROR:
            .nodeUnavailable
        case ER_DUP_ENTRY, ER_DUP_KEY, ER_DUP_ENTRY_WITH_KEY_NAME:
            .duplicateKey
        case ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT:
            .conflict
        case ER_TABLEACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR,
             ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR:
            .accessDenied
        default:
            .other
        }
    }

    /// The database cannot serve this request now (a client should retry later, an
    /// HTTP answer is 503): unreachable, no usable node, or conflicts that persisted
    /// through every rerun.
    public var meansUnavailable: Bool { kind == .connectionLost || kind == .conflict || kind == .nodeUnavailable }

    /// The connection must be dropped and another server (the next of `hosts`) tried.
    var abandonsServer: Bool { kind == .connectionLost || kind == .nodeUnavailable }

    /// A deadlock, or on Galera a certification conflict (both 1213): the server rolled
    /// the statement or transaction back. Not a lock wait timeout, which a caller may
    /// have set short on purpose to give up.
    var isDeadlock: Bool { Int32(code) == ER_LOCK_DEADLOCK }

    /// A lock wait timeout (1205); on a Galera node cut off from its cluster, also what a
    /// read waiting for causality gets.
    var isLockWaitTimeout: Bool { Int32(code) == ER_LOCK_WAIT_TIMEOUT }

    /// "MySQL server has gone away": found when sending on a connection the server had
    /// already closed, so the statement never ran and a retry on a new connection is safe.
    var isStaleConnection: Bool { Int32(code) == CR_SERVER_GONE_ERROR }

    public var description: String {
        if kind == .invalidValue { return "a stored value is not usable: \(operation)" }
        let base = "MariaDB \(operation) failed: error \(code) (SQLSTATE \(sqlState), \(kind))"
        guard Int32(code) == CR_SSL_CONNECTION_ERROR else { return base }
        return base + ": TLS failed (the server's certificate is not signed by the configured CA or does not name the host connected to, or the " +
                      "server offers no TLS)"
    }

    public var debugDescription: String {
        "\(description): \(serverMessage)"
    }
}
