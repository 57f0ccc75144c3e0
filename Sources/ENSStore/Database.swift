public import MariaDB
internal import OpenSSL

// The database as the layers above ENSStore hold it. They open it from ens.conf's
// settings, hand it to the stores, check that it can take work and run a transaction
// across stores; they never run a statement of their own, and never import MariaDB.
// (The names differ from MariaDB's own members on purpose: a member declared here is
// what a module that imports only ENSStore can see.)

/// A connection (in production) or a stand-in (in tests) the stores run statements on.
public typealias Database = any SQLDatabase
/// Where and as whom to connect: `ENSConfiguration.serviceDatabase()`.
public typealias DatabaseSettings = MariaDBConfiguration
/// What a statement or a connection throws, and the one error every store throws: a
/// store runs statements, and what else it does (opening or sealing a stored value) fails
/// as `DatabaseError.invalidValue`. So a caller tells "try again" (`isUnavailable`) from
/// "the other request won" (`isWriteConflict`) without knowing what a store does inside,
/// and a transaction sees the conflicts it reruns, whichever store threw them.
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

    /// `inTransaction` for a store's own work, whose failures are typed already.
    func atomically<T>(_ body: () throws(DatabaseError) -> T) throws(DatabaseError) -> T {
        try keepingType { try transaction { () throws(DatabaseError) -> T in try body() } }
    }

    /// `retryingConflicts` for a store's own work.
    func rerunningConflicts<T>(_ body: () throws(DatabaseError) -> T) throws(DatabaseError) -> T {
        try keepingType { try retryingConflicts { () throws(DatabaseError) -> T in try body() } }
    }

    /// The connection's transaction and rerun take untyped bodies; given a body that
    /// throws only `DatabaseError`, so do they.
    private func keepingType<T>(_ call: () throws -> T) throws(DatabaseError) -> T {
        do {
            return try call()
        } catch let error as DatabaseError {
            throw error
        } catch {
            preconditionFailure("work that throws only DatabaseError threw \(type(of: error))")
        }
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

/// Random bytes for a token, a claim or a lease. Without a working CSPRNG nothing could
/// be sealed either, so this stops the process rather than throw a database error.
func randomBytes(_ count: Int) -> [UInt8] {
    do {
        return try Digest.randomBytes(count)
    } catch {
        preconditionFailure("the CSPRNG failed: \(error)")
    }
}

/// Sealing or opening a stored value inside a store (the vault's work, not a statement):
/// a failure is `DatabaseError.invalidValue(what)`. `what` names the value for the log
/// ("sync key"); the vault's own error is dropped because it says no more than that.
func storedValue<T>(_ what: String, _ body: () throws -> T) throws(DatabaseError) -> T {
    do {
        return try body()
    } catch {
        throw .invalidValue(what)
    }
}

extension Sequence {
    /// `compactMap` whose failure keeps its type: the standard library's rethrows, so
    /// a closure that throws only `DatabaseError` would come out as `any Error`.
    func compactMapTyped<T, E: Error>(_ transform: (Element) throws(E) -> T?) throws(E) -> [T] {
        var result: [T] = []
        for element in self {
            if let value = try transform(element) { result.append(value) }
        }
        return result
    }
}
