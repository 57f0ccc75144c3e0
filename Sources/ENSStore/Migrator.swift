internal import ENSModel
public import MariaDB
internal import POSIX

/// Applies the numbered SQL files of `sql/migrations` (`001_initial.sql`, ...) in order,
/// each at most once, recording them in `schema_migrations`. Runs as the migration
/// account; the service account cannot do DDL.
public struct Migrator {
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let problem: String
        public var description: String { problem }
    }

    public let directory: String
    public let database: Connection

    public init(directory: String, database: Connection) {
        self.directory = directory
        self.database = database
    }

    /// A migrator on its own connection with `settings` (the migration account's).
    public init(directory: String, settings: DatabaseSettings) {
        self.init(directory: directory, database: Connection(configuration: settings))
    }

    /// The migration files, by version.
    public func available() throws -> [(version: Int, name: String)] {
        let names: [String]
        do {
            names = try Files.list(directory)
        } catch {
            throw Failure(problem: "cannot list migrations in \(directory): \(error)")
        }
        var result: [(Int, String)] = []
        for name in names where name.hasSuffix(".sql") {
            guard let underscore = name.firstIndex(of: "_"), let version = Int(name[..<underscore]) else {
                throw Failure(problem: "migration file \(name) does not start with a number and '_'")
            }
            if result.contains(where: { $0.0 == version }) { throw Failure(problem: "two migrations share version \(version)") }
            result.append((version, name))
        }
        return result.sorted { $0.0 < $1.0 }
    }

    /// Applies what is missing; returns the names applied (empty when up to date).
    /// `then` runs Swift steps a migration needs after its SQL (by file name), before the
    /// migration is recorded: a step that fails leaves the migration to be applied again
    /// in full (migrations and their steps are idempotent).
    @discardableResult
    public func migrate(then steps: [String: (Connection) throws -> Void] = [:]) throws -> [String] {
        try database.executeScript(unsafeSQL: """
            CREATE TABLE IF NOT EXISTS schema_migrations (
              version INT NOT NULL PRIMARY KEY,
              name VARCHAR(255) NOT NULL,
              applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
            ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
            """)
        let applied = Set(try database.query("SELECT version FROM schema_migrations").map { row -> Int64 in try row.decode(Int64.self) })
        var done: [String] = []
        for (version, name) in try available() where !applied.contains(Int64(version)) {
            let bytes: [UInt8]
            do {
                bytes = try Files.read(directory + "/" + name)
            } catch {
                throw Failure(problem: "cannot read \(name): \(error)")
            }
            for statement in Self.statements(in: String(decoding: bytes, as: UTF8.self)) {
                do {
                    try database.executeScript(unsafeSQL: statement)
                } catch {
                    throw Failure(problem: "migration \(name) failed: \(String(reflecting: error))")
                }
            }
            if let step = steps[name] {
                do {
                    try step(database)
                } catch {
                    throw Failure(problem: "migration \(name) failed after its SQL: \(String(reflecting: error))")
                }
            }
            try database.execute("INSERT INTO schema_migrations (version, name) VALUES (\(version), \(name))")
            done.append(name)
        }
        return done
    }

    /// Splits a migration file into statements: a statement ends with `;` at the end of
    /// a line. `--` comment lines are dropped.
    public static func statements(in text: String) -> [String] {
        var statements: [String] = []
        var current = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: " \t\r")
            if trimmed.hasPrefix("--") || trimmed.isEmpty && current.isEmpty { continue }
            current += line + "\n"
            if trimmed.hasSuffix(";") {
                statements.append(current.trimmingCharacters(in: " \t\r\n;"))
                current = ""
            }
        }
        let rest = current.trimmingCharacters(in: " \t\r\n")
        if !rest.isEmpty { statements.append(rest) }
        return statements
    }
}
