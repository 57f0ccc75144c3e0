public import MariaDB

// The database as the layers above ENSStore hold it. They open it from ens.conf's
// settings, hand it to the stores, check that it can take work and run a transaction
// across stores; they never run a statement of their own, and never import MariaDB.
// (The names differ from MariaDB's own members on purpose: a member declared here is
// what a module that imports only ENSStore can see.)

/// A connection (in production) or a stand-in (in tests) the stores run statements on.
public typealias Database = any SQLDatabase
/// Where and as whom to connect: `ENSConfiguration.serviceDatabase()`.
public typealias DatabaseSettings = MariaDBConfiguration
/// What a statement or a connection throws.
public typealias DatabaseError = MariaDBError

/// Opens connections lazily: the first statement connects, a lost connection reconnects.
public enum Databases {
    /// A connection with `settings`; nothing is dialled until the first statement.
    public static func connection(_ settings: DatabaseSettings) -> Database {
        Connection(configuration: settings)
    }
}

extension SQLDatabase {
    /// Runs `body` in one transaction (rerun on a Galera conflict; joined when one is
    /// already open), committing when it returns and rolling back when it throws.
    public func inTransaction<T>(_ body: () throws -> T) throws -> T {
        try transaction(body)
    }

    /// Throws unless the database can take work now (a synced Galera node, reachable).
    public func checkReadiness() throws(DatabaseError) {
        try checkHealth()
    }

    /// Closes the connection, if this is one (a CGI request's end, a job's end).
    public func close() {
        (self as? Connection)?.disconnect()
    }
}

extension MariaDBError {
    /// Unreachable, no usable node, or a conflict that outlasted every rerun: the work
    /// was rolled back and may be tried again (answered 503).
    public var isUnavailable: Bool { meansUnavailable }
    /// Another host's transaction holds or changed the same rows (a Galera certification
    /// failure or a lock wait): this one was rolled back.
    public var isWriteConflict: Bool { kind == .conflict }
}
