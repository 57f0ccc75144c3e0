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
            let text = String(decoding: bytes, as: UTF8.self)
            try contractGate(name: name, text: text)
            for statement in Self.statements(in: text) {
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

    // MARK: Contract steps

    /// The release a contract step needs every host to run first: its header's
    /// `-- contract: requires release X.Y.Z` (scripts/check_migrations.py requires one
    /// in every `NNN_contract_*.sql`); nil for an expand migration.
    static func requiredRelease(name: String, text: String) throws -> [Int]? {
        guard name.contains("_contract_") else { return nil }
        let marker = "-- contract: requires release "
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(marker) }),
              let release = Self.release(String(line.dropFirst(marker.count)).trimmingCharacters(in: " \r")) else {
            throw Failure(problem: "contract step \(name) does not say which release every host must run first ('\(marker)X.Y.Z')")
        }
        return release
    }

    /// "0.2.0" as [0, 2, 0]; nil for anything else.
    static func release(_ text: String) -> [Int]? {
        let numbers = text.split(separator: ".", omittingEmptySubsequences: false).map { Int($0).flatMap { $0 >= 0 ? $0 : nil } }
        guard numbers.count == 3, numbers.allSatisfy({ $0 != nil }) else { return nil }
        return numbers.compactMap { $0 }
    }

    /// A contract step removes what an older release needs: it runs only when no host in
    /// SenderHosts runs one (a host with no recorded release runs one from before
    /// 0.2.0). A host that stopped for good must be drained and removed first
    /// (`ens-sender drain --host`). Names each host that holds it back.
    func contractGate(name: String, text: String) throws {
        guard let required = try Self.requiredRelease(name: name, text: text) else { return }
        let hosts = try database.query("SELECT host, release_version FROM SenderHosts ORDER BY host").map { try $0.decode(String.self, String?.self) }
        let behind = hosts.filter { _, release in release.flatMap(Self.release).map { $0.lexicographicallyPrecedes(required) } ?? true }
        guard behind.isEmpty else {
            let named = behind.map { host, release in "\(host) runs \(release ?? "a release before 0.2.0")" }.joined(separator: "; ")
            throw Failure(problem: """
                contract step \(name) needs every host at release \(required.map(String.init).joined(separator: ".")) or later: \(named). \
                Upgrade those hosts first (or drain and remove one that is gone: ens-sender drain --host)
                """)
        }
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
