public import Foundation
public import MariaDB

/// A throwaway MariaDB for the unit tests that need a real database but not the stack:
/// a data directory of its own under the temporary directory (mariadb-install-db), one
/// `mariadbd --no-defaults` on a Unix socket in it, no TCP, small buffers and no
/// durability (nothing outlives the test run), stopped by `stop()` (kill -9, then the
/// directory removed). About a second to start on a 2-core host (`startSeconds`).
///
/// A watchdog started with it kills it and removes the directory once the test
/// process is gone, so a crashed or interrupted run leaves nothing behind.
public final class MariaDBInstance: @unchecked Sendable {
    public let directory: URL
    public var socketPath: String { directory.appendingPathComponent("mysqld.sock").path }
    /// How long the install and the start took, in seconds.
    public let startSeconds: Double

    /// The two programs, found where Debian puts them (mariadbd is in /usr/sbin, which a
    /// non-root PATH may lack).
    static func program(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/local/sbin", "/usr/bin"]
        return directories.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Whether mariadbd and mariadb-install-db are installed (scripts/deps.sh installs
    /// mariadb-server); tests that need an instance are skipped without them.
    public static var isInstalled: Bool { program("mariadbd") != nil && program("mariadb-install-db") != nil }

    /// The repository's sql/ directory, found from this file's place in it.
    public static let sqlDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../sql").standardizedFileURL.path

    /// Creates the data directory and starts the server; returns once it answers.
    public init() throws {
        guard let server = Self.program("mariadbd"), let install = Self.program("mariadb-install-db") else {
            throw MariaDBInstanceFailure(output: "mariadbd or mariadb-install-db is not installed")
        }
        // Short: a Unix socket's path has at most 107 bytes.
        directory = URL(fileURLWithPath: "/tmp",
                        isDirectory: true).appendingPathComponent("ens-mdb-\(UUID().uuidString.prefix(8))", isDirectory: true)
        let started = Date()
        // Server options shared by the install (its bootstrap server) and the server:
        // small buffers and log, no doublewrite, a flush per second rather than per commit.
        let small = "--innodb-buffer-pool-size=16M --innodb-log-file-size=8M --innodb-log-buffer-size=1M --innodb-doublewrite=0 "
            + "--innodb-flush-log-at-trx-commit=0 --key-buffer-size=1M --performance-schema=0 --skip-log-bin"
        let user = (try? Shell.run("id -un")) ?? "root"
        do {
            // In bash, which closes descriptors of any number: the server and the
            // watchdog outlive this script, and must not keep a descriptor this script
            // inherited from the test process (a pipe another thread's Shell.run is
            // reading, or a socket a test waits to see closed: not every descriptor a
            // test process holds is close-on-exec).
            // Arguments: $1 directory, $2 install, $3 server, $4 user, $5 test process.
            let script = """
                set -e
                for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true; done
                mkdir -m 700 "$1"
                "$2" --no-defaults --datadir="$1/data" --user="$4" --auth-root-authentication-method=normal \\
                  --skip-test-db --skip-name-resolve \(small) >"$1/install.log" 2>&1
                "$3" --no-defaults --datadir="$1/data" --socket="$1/mysqld.sock" --skip-networking --skip-name-resolve \\
                  --pid-file="$1/mysqld.pid" --log-error="$1/mariadb.log" --user="$4" --max-connections=100 \(small) \\
                  </dev/null >/dev/null 2>&1 &
                server=$!
                echo $server >"$1/server.pid"
                # The watchdog: once the test process is gone, so are the server and its
                # directory. A process that ended counts as gone while still a zombie
                # (this host's init may be slow to reap what it inherits).
                alive() { [ -e "/proc/$1/status" ] && ! grep -qs '^State:.*(zombie)' "/proc/$1/status"; }
                (trap '' HUP; while alive "$5" && [ -d "$1" ]; do sleep 1; done
                 kill -9 $server 2>/dev/null; sleep 0.2; rm -rf "$1") </dev/null >/dev/null 2>&1 &
                """
            _ = try Shell.run("script=$1; shift; exec bash -c \"$script\" bash \"$@\"",
                              [script, directory.path, install, server, user, "\(ProcessInfo.processInfo.processIdentifier)"])
        } catch {
            let log = (try? String(contentsOf: directory.appendingPathComponent("install.log"), encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(at: directory)
            throw MariaDBInstanceFailure(output: "\(error)\n\(log)")
        }
        // Until it answers: a connection that succeeds.
        let socket = directory.appendingPathComponent("mysqld.sock").path
        let deadline = Date().addingTimeInterval(30)
        var answered = false
        while !answered && Date() < deadline {
            let probe = Connection(configuration: MariaDBConfiguration(unixSocket: socket, user: "root", password: "", database: nil))
            answered = (try? probe.query("SELECT 1")) != nil
            probe.disconnect()
            if !answered { Thread.sleep(forTimeInterval: 0.02) }
        }
        startSeconds = Date().timeIntervalSince(started)
        guard answered else {
            let log = self.log
            stop()
            throw MariaDBInstanceFailure(output: log)
        }
    }

    /// What the server logged so far.
    public var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("mariadb.log"), encoding: .utf8)) ?? ""
    }

    /// The administrator's configuration (root over the socket, no password).
    public func administrator(database: String? = nil) -> MariaDBConfiguration {
        MariaDBConfiguration(unixSocket: socketPath, user: "root", password: "", database: database)
    }

    /// Creates `database` with ENS's two accounts as sql/accounts.sql.in makes them
    /// (the migration account with DDL on it, the service account with rows only),
    /// and returns their configurations. Once per instance: the accounts are the
    /// server's, and a second call takes their grants on the first database away. Apply the schema with the migration account
    /// (ENSStore's `Migrator`, as `ens-cron migrate` does); run ENS with the service one.
    public func createENSDatabase(_ database: String) throws -> (service: MariaDBConfiguration, migration: MariaDBConfiguration) {
        let template = try String(contentsOfFile: Self.sqlDirectory + "/accounts.sql.in", encoding: .utf8)
        let servicePassword = UUID().uuidString, migrationPassword = UUID().uuidString
        let script = template.replacingOccurrences(of: "@DB_NAME@", with: database)
            .replacingOccurrences(of: "@SERVICE_PASSWORD@", with: servicePassword)
            .replacingOccurrences(of: "@MIGRATE_PASSWORD@", with: migrationPassword)
        let administrator = Connection(configuration: administrator())
        defer { administrator.disconnect() }
        for statement in script.split(separator: "\n").filter({ !$0.hasPrefix("--") }).joined(separator: "\n").split(separator: ";") {
            let text = statement.trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty { try administrator.executeScript(unsafeSQL: text) }
        }
        return (MariaDBConfiguration(unixSocket: socketPath, user: "ens_service", password: servicePassword, database: database),
                MariaDBConfiguration(unixSocket: socketPath, user: "ens_migrate", password: migrationPassword, database: database))
    }

    /// The migration files ENS applies (`db.migrations_dir`'s default in the repository).
    public static var migrationsDirectory: String { sqlDirectory + "/migrations" }

    public func stop() {
        _ = try? Shell.run("""
            pid=$(cat "$1/server.pid" 2>/dev/null) || exit 0
            kill -9 "$pid" 2>/dev/null
            # Until it is gone or a zombie (which kill -0 would still find), at most 2 s.
            for _ in $(seq 100); do [ -e "/proc/$pid/status" ] && ! grep -qs '^State:.*(zombie)' "/proc/$pid/status" || break; sleep 0.02; done
            rm -rf "$1"
            """, [directory.path])
    }

    deinit {
        stop()
    }
}

/// The throwaway MariaDB did not start; what it said.
public struct MariaDBInstanceFailure: Error, CustomStringConvertible {
    public let output: String
    public var description: String { "MariaDB did not start:\n\(output)" }
}
