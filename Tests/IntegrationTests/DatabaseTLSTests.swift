import Foundation
import MariaDB
import POSIX
import Testing

/// A database on another host, over TLS (db.tls_*): the stack's MariaDB listens on
/// loopback TCP with a certificate from a CA of its own, for 127.0.0.1 and localhost but
/// not 127.0.0.2. Accounts for the TCP addresses are created here, REQUIRE SSL, as
/// docs/deployment.md's "A database on another host" tells an operator to.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct DatabaseTLSTests {
    let port = (Int(TestStack.port) ?? 18443) + 20
    let ca = TestStack.directory + "/tls/mariadb-ca.crt"
    let servicePassword: String
    let migrationPassword: String

    init() throws {
        servicePassword = try String(contentsOfFile: TestStack.directory + "/secrets/db-service.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        migrationPassword = try String(contentsOfFile: TestStack.directory + "/secrets/db-migrate.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let admin = TestStack.administratorConnection()
        for host in ["127.0.0.1", "127.0.0.2"] {
            try admin.execute("CREATE USER IF NOT EXISTS 'ens_service'@'\(unsafe: host)' IDENTIFIED BY '\(unsafe: servicePassword)' REQUIRE SSL")
            try admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ens.* TO 'ens_service'@'\(unsafe: host)'")
            try admin.execute("CREATE USER IF NOT EXISTS 'ens_migrate'@'\(unsafe: host)' IDENTIFIED BY '\(unsafe: migrationPassword)' REQUIRE SSL")
            try admin.execute("GRANT ALL PRIVILEGES ON ens.* TO 'ens_migrate'@'\(unsafe: host)'")
        }
    }

    func connection(host: String, tls: MariaDBConfiguration.TLS?) -> Connection {
        Connection(configuration: MariaDBConfiguration(host: host, port: port, user: "ens_service", password: servicePassword,
                                                      database: "ens", tls: tls))
    }

    @Test func aVerifiedTLSConnectionWorks() throws {
        let database = connection(host: "127.0.0.1", tls: .init(caFile: ca))
        let row = try #require(try database.queryOne("SHOW SESSION STATUS LIKE 'Ssl_version'"))
        let (_, version) = try row.decode(String.self, String.self)
        #expect(version.hasPrefix("TLSv1.2") || version.hasPrefix("TLSv1.3"), "\(version)")
        #expect(database.tlsCipher?.isEmpty == false)
        #expect(try database.queryOne("SELECT COUNT(*) FROM APITokens")?.decode(Int.self) != nil)
    }

    @Test func aCertificateFromAnotherCAIsRefused() throws {
        try withScratchDirectory { directory in
            let other = directory + "/other-ca.crt"
            _ = try TestStack.run("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                                                      "-subj", "/CN=Someone else's CA", "-keyout", directory + "/other-ca.key", "-out", other])
            let database = connection(host: "127.0.0.1", tls: .init(caFile: other))
            #expect(throws: MariaDBError.self) { try database.connect() }
            do {
                try database.connect()
            } catch {
                #expect("\(error)".contains("TLS failed"), "\(error)")
                #expect(!"\(error)".contains(servicePassword))
            }
            #expect(!database.isConnected)
        }
    }

    @Test func aServerCertificateForAnotherNameIsRefused() throws {
        // The certificate names 127.0.0.1 and localhost; 127.0.0.2 is the same server.
        let database = connection(host: "127.0.0.2", tls: .init(caFile: ca))
        #expect(throws: MariaDBError.self) { try database.connect() }
    }

    /// The server's side of the bargain (REQUIRE SSL): a client that does not ask for
    /// TLS is refused. The stack's MariaDB skips name resolution, so 127.0.0.1 is the
    /// account's host, not 'localhost'.
    @Test func withoutTLSTheAccountsAreRefused() throws {
        let database = connection(host: "127.0.0.1", tls: nil)
        #expect(throws: MariaDBError.self) { try database.connect() }
        let verified = connection(host: "127.0.0.1", tls: .init(caFile: ca))
        let user = try #require(try verified.queryOne("SELECT CURRENT_USER()")).decode(String.self)
        #expect(user == "ens_service@127.0.0.1")
    }

    /// The real binary with a configuration as docs/deployment.md says: the migration account and
    /// the service account both over verified TLS; with the wrong CA, one clear line.
    @Test func ensCronConnectsOverTLSAsConfigured() throws {
        try withScratchDirectory { directory in
            let original = try String(contentsOfFile: TestStack.directory + "/ens.conf", encoding: .utf8)
            let tcp = original.split(separator: "\n", omittingEmptySubsequences: false)
                .filter { !$0.hasPrefix("db.socket") && !$0.hasPrefix("db.host") && !$0.hasPrefix("db.port") }
                .joined(separator: "\n") + "\ndb.socket =\ndb.host = 127.0.0.1\ndb.port = \(port)\ndb.tls_ca_file = \(ca)\n"
            try tcp.write(toFile: directory + "/tls.conf", atomically: true, encoding: .utf8)
            let migrated = try cron(["migrate", "--config", directory + "/tls.conf"])
            #expect(migrated.status == 0 && migrated.output.contains("schema is up to date"), "\(migrated.output)")
            let listed = try cron(["token", "list", "--config", directory + "/tls.conf"])
            #expect(listed.status == 0, "\(listed.output)")

            _ = try TestStack.run("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                                                      "-subj", "/CN=Wrong CA", "-keyout", directory + "/wrong.key", "-out", directory + "/wrong.crt"])
            try tcp.replacingOccurrences(of: "db.tls_ca_file = \(ca)", with: "db.tls_ca_file = \(directory)/wrong.crt")
                .write(toFile: directory + "/wrong.conf", atomically: true, encoding: .utf8)
            let refused = try cron(["token", "list", "--config", directory + "/wrong.conf"])
            #expect(refused.status == 1)
            #expect(refused.output.contains("TLS failed"), "\(refused.output)")

            // TLS settings that would be ignored are refused at start.
            try (original + "\ndb.tls_ca_file = \(ca)\n").write(toFile: directory + "/socket.conf", atomically: true, encoding: .utf8)
            let ignored = try cron(["token", "list", "--config", directory + "/socket.conf"])
            #expect(ignored.status == 1 && ignored.output.contains("db.socket is set"), "\(ignored.output)")
        }
    }

    /// ens-cron with its standard error in the output (where it reports failures).
    func cron(_ arguments: [String]) throws -> (status: Int32, output: String) {
        try ChildProcess.run("/bin/sh", ["-c", "exec \"$0\" \"$@\" 2>&1", TestStack.root + "/.build/debug/ens-cron"] + arguments)
    }

    func withScratchDirectory(_ body: (String) throws -> Void) throws {
        let directory = NSTemporaryDirectory() + "ens-db-tls-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try body(directory)
    }
}
