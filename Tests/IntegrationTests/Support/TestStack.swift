import Codecs
import Curl
import Foundation
import MariaDB
import OpenSSL
import POSIX
import Testing
internal import ENSVault

/// The private stack `make test` starts (scripts/test.sh): where it lives and how to
/// talk to it. Integration tests are enabled only when it is there.
enum TestStack {
    static let environment = ProcessInfo.processInfo.environment
    static let directory = environment["ENS_TEST_VAR"] ?? ""
    static let port = environment["ENS_TEST_PORT"] ?? "18443"
    static let root = environment["ENS_TEST_ROOT"] ?? FileManager.default.currentDirectoryPath
    /// The web server in front: "nginx", or "apache" for scripts/test.sh's second pass
    /// through Apache httpd on the same port.
    static var front: String {
        FileManager.default.fileExists(atPath: directory + "/run/apache.pid") ? "apache" : "nginx"
    }
    static var isRunning: Bool {
        !directory.isEmpty && FileManager.default.fileExists(atPath: directory + "/run/\(front).pid")
    }

    static var baseURL: String { "https://localhost:\(port)" }
    static var certificate: String { directory + "/tls/server.crt" }

    /// A client that trusts only the stack's self-signed certificate; `from` another
    /// loopback address (127.0.0.2) is another client address to nginx.
    static func client(http2: Bool = true, from localAddress: String? = nil) throws -> HTTPClient {
        try HTTPClient(configuration: HTTPClientConfiguration(caBundlePath: certificate, preferHTTP2: http2, localAddress: localAddress))
    }

    static func get(_ path: String, client: HTTPClient? = nil) throws -> HTTPResponse {
        try (client ?? self.client()).send(HTTPRequest(method: .get, url: baseURL + path))
    }

    /// The bearer token GET /metrics requires (the stack's metrics.token_file).
    static var metricsToken: String {
        ((try? String(contentsOfFile: directory + "/secrets/metrics.token", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// GET /metrics as the scraper asks: `Authorization: Bearer <the stack's token>`.
    static func metrics(client: HTTPClient? = nil) throws -> HTTPResponse {
        try metrics(authorization: "Bearer \(metricsToken)", client: client)
    }

    /// GET /metrics with this `Authorization` header (nil: none).
    static func metrics(authorization: String?, client: HTTPClient? = nil) throws -> HTTPResponse {
        try (client ?? self.client()).send(HTTPRequest(method: .get, url: baseURL + "/metrics",
                                                       headers: authorization.map { [("Authorization", $0)] } ?? []))
    }

    static func post(_ path: String, body: [UInt8], contentType: String?,
                     headers: [(String, String)] = [], client: HTTPClient? = nil) throws -> HTTPResponse {
        var allHeaders = headers
        allHeaders.append(("Content-Type", contentType ?? ""))
        return try (client ?? self.client()).send(HTTPRequest(method: .post, url: baseURL + path, headers: allHeaders, body: body))
    }

    /// Runs scripts/stack.sh with the test stack's environment.
    @discardableResult
    static func stack(_ arguments: String...) throws -> String {
        try run(root + "/scripts/stack.sh", arguments)
    }

    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let (status, output) = try ChildProcess.run(executable, arguments)
        guard status == 0 else {
            throw StackError(message: "\(executable) \(arguments.joined(separator: " ")) exited with \(status)")
        }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Polls `condition` every 100 ms until it holds or `seconds` pass.
    static func eventually(within seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return try condition()
    }

    /// Whether the NotificationLog rows of `pushes` (by their `ens.id`) are all written
    /// within `seconds`, in whichever shard's schema (`ens`, `ens_shard…`) holds each.
    static func logRowsWritten(for pushes: [APNsSimulator.Accepted], within seconds: Double = 5) throws -> Bool {
        let ids = pushes.compactMap { ($0.payload["ens"] as? [String: Any])?["id"] as? String }
        guard !ids.isEmpty else { return true }
        let database = try serviceConnection()
        defer { database.disconnect() }
        let schemas = try database.query("""
            SELECT schema_name FROM information_schema.schemata WHERE schema_name = 'ens' OR schema_name LIKE 'ens\\_shard%'
            """).map { try $0.decode(String.self) }
        return try eventually(within: seconds) {
            var written: Int64 = 0
            for schema in schemas {
                let row = try database.queryOne("SELECT COUNT(*) FROM \(unsafe: schema).NotificationLog WHERE LOWER(HEX(id)) IN (\(list: ids))")
                written += try row.map { row throws in try row.decode(Int64.self) } ?? 0
            }
            return written == Int64(Set(ids).count)
        }
    }

    /// A connection as the restricted service account, exactly as the responders connect.
    static func serviceConnection(database: String = "ens") throws -> Connection {
        let password = try String(contentsOfFile: directory + "/secrets/db-service.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return Connection(configuration: MariaDBConfiguration(
            unixSocket: directory + "/run/mysqld.sock", user: "ens_service", password: password, database: database))
    }

    /// PIDs of processes whose command line contains `pattern` and this stack's directory.
    static func pids(matching pattern: String) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { Int32($0) }.filter { pid in
            guard let raw = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            let commandLine = String(decoding: raw.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return commandLine.contains(pattern) && commandLine.contains(directory)
        }
    }

    /// The stack's ens.conf, and its text as the stack wrote it.
    static var configPath: String { directory + "/ens.conf" }

    /// Writes `text` as the stack's ens.conf and reloads the responder pool (SIGHUP, what
    /// `systemctl reload` sends); true once the supervisor and every worker have logged
    /// the reload, with `applied` leading what they say they applied when it is given.
    static func reloadResponders(with text: String, applied: String? = nil) throws -> Bool {
        guard let pool = pids(matching: "ens-fcgi --config").first else { throw StackError(message: "no responder pool is running") }
        let workers = pids(matching: "ens-fcgi --worker").count
        func log() -> String { (try? String(contentsOfFile: directory + "/log/ens-fcgi.log", encoding: .utf8)) ?? "" }
        let mark = log().count
        let line = applied.map { #"msg="configuration reloaded" applied="# + $0 } ?? "configuration reloaded"
        try text.write(toFile: configPath, atomically: true, encoding: .utf8)
        kill(pool, SIGHUP)
        return eventually(within: 10) { String(log().dropFirst(mark)).components(separatedBy: line).count - 1 >= 1 + workers }
    }

    /// A fresh API token for a test.
    static func newToken(_ label: String = "test") throws -> String {
        try stack("token", label)
    }
}

struct StackError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

extension HTTPResponse {
    /// The body as a JSON object of strings.
    var json: [String: String] {
        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: String]) ?? [:]
    }
}

extension TestStack {
    /// A connection as the database administrator (root over the Unix socket, as
    /// `scripts/stack.sh db-setup` connects), for tests that need their own schema.
    static func administratorConnection(database: String? = nil) -> Connection {
        Connection(configuration: MariaDBConfiguration(unixSocket: directory + "/run/mysqld.sock", user: "root", password: "", database: database))
    }
}

extension TestStack {
    /// The stack's master key (scripts/stack.sh writes it as hex), for tests that must
    /// compute what the vault computes, such as a device token's lookup hash.
    static func masterKey() throws -> AESGCMKey {
        let text = try String(contentsOfFile: directory + "/secrets/master.key", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let bytes = Hex.decode(text) else { throw TestStackError.malformed("master.key") }
        return try AESGCMKey(bytes: bytes)
    }

    enum TestStackError: Error { case malformed(String) }
}

extension TestStack {
    /// Gives a subscription row a test edited on purpose (to stage a state ENS itself
    /// would reach) the `RowBinding` MAC ENS would have written with it; rows edited
    /// without this fail their integrity check, as a database writer's would.
    static func rebind(userID: String, database: Connection) throws {
        let binding = RowBinding(vault: Vault(masterKey: try masterKey()))
        guard let row = try database.queryOne("""
            SELECT id, generation, mail_backend, backend_url, backend_tenant, endpoint FROM EnsSubscriptionInfo WHERE userid = \(userID)
            """) else { return }
        let (id, generation, backend, url, tenant,
             endpoint) = try row.decode(Int64.self, Int64.self, String.self, String?.self, String?.self, String?.self)
        let mac = binding.subscription(recordID: id, generation: generation, backend: backend, backendURL: url, tenant: tenant, endpoint: endpoint)
        try database.execute("UPDATE EnsSubscriptionInfo SET binding_mac = \(mac) WHERE id = \(id)")
    }

    /// Gives a device row a test edited directly its MAC again, as ENS would have
    /// written it (the test holds the master key; a database writer does not).
    static func rebindDevice(id: Int64, database: Connection) throws {
        let binding = RowBinding(vault: Vault(masterKey: try masterKey()))
        guard let row = try database.queryOne("""
            SELECT d.subscription_row, d.token_hash, d.bundle_id, d.privacy_mode, d.preview_key, d.endpoint, d.secret_hash, s.device_epoch
            FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE d.id = \(id)
            """) else { return }
        let (recordID, tokenHash, bundleID, mode, previewKey, endpoint, secretHash, epoch)
            = try row.decode(Int64.self, [UInt8].self, String.self, Int64.self, [UInt8]?.self, String?.self, [UInt8]?.self, Int64.self)
        let mac = binding.device(id: id, recordID: recordID, tokenHash: tokenHash, bundleID: bundleID, privacyMode: Int(mode), previewKey: previewKey,
                                 endpoint: endpoint, secretHash: secretHash, epoch: epoch)
        try database.execute("UPDATE Devices SET binding_mac = \(mac) WHERE id = \(id)")
    }
}
