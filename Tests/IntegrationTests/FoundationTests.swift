import Curl
import Foundation
import MariaDB
import POSIX
import Testing

/// The foundation through the real path: TLS + HTTP/2 at nginx, FastCGI, MariaDB.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct FoundationTests {
    @Test func aliveAnswersOverTLSWithHTTP2() throws {
        let response = try TestStack.get("/alive")
        #expect(response.status == 200)
        #expect(response.httpMajorVersion == 2)
        #expect(response.bodyText == #"{"responseCode":"Alive"}"#)
        #expect(response.header("content-type") == "application/json; charset=utf-8")
        #expect(response.header("strict-transport-security") != nil)
    }

    @Test func headAliveHasStatusAndNoBody() throws {
        let response = try TestStack.client().send(HTTPRequest(method: .head, url: TestStack.baseURL + "/alive"))
        #expect(response.status == 200)
        #expect(response.body.isEmpty)
    }

    @Test func unknownPathsGetJSON404() throws {
        for path in ["/nope", "/alive/extra", "/getpublickey.php", "/ews", "/ALIVE"] {
            let response = try TestStack.get(path)
            #expect(response.status == 404, "path \(path)")
            #expect(response.json["responseCode"] == "NotFound", "path \(path)")
            #expect(response.json["message"]?.isEmpty == false)
        }
        // Exchange's callback paths take POST only.
        let callback = try TestStack.get("/ews/1/2/abc")
        #expect(callback.status == 405 && callback.header("Allow") == "POST")
    }

    /// The web server refuses these before ENS sees them: nginx with its own plain 400;
    /// Apache with a JSON 400 for the bad escape, and a 404 for an encoded NUL.
    @Test func malformedRequestLinesGet400() throws {
        for path in ["/%00", "/alive%ZZ"] {
            let response = try TestStack.get(path)
            let expected = TestStack.front == "apache" && path == "/%00" ? 404 : 400
            #expect(response.status == expected, "path \(path)")
        }
    }

    @Test func wrongMethodGetsJSON405() throws {
        let response = try TestStack.post("/alive", body: [], contentType: nil)
        #expect(response.status == 405)
        #expect(response.json["responseCode"] == "MethodNotAllowed")
        #expect(response.header("allow") == "GET, HEAD")
    }

    @Test func tlsOffersOnlyModernProtocols() throws {
        for (flag, shouldConnect) in [("-tls1_1", false), ("-tls1", false), ("-tls1_2", true), ("-tls1_3", true)] {
            let (status, _) = try ChildProcess.run("/bin/sh",
                ["-c", "openssl s_client -connect 127.0.0.1:\(TestStack.port) \(flag) -brief </dev/null >/dev/null 2>&1"])
            #expect((status == 0) == shouldConnect, "openssl s_client \(flag)")
        }
    }

    @Test func serviceAccountCannotChangeTheSchema() throws {
        let database = try TestStack.serviceConnection()
        #expect(try database.query("SELECT COUNT(*) FROM APITokens").count == 1)
        for ddl in [
            "CREATE TABLE intruder (id INT)",
            "DROP TABLE APITokens",
            "ALTER TABLE APITokens ADD COLUMN intruder INT",
            "CREATE INDEX intruder ON APITokens (label)",
            "GRANT SELECT ON ens.* TO 'ens_service'@'localhost'",
        ] {
            do {
                try database.executeScript(unsafeSQL: ddl)
                Issue.record("the service account ran: \(ddl)")
            } catch {
                #expect(error.kind == .accessDenied, "\(ddl): \(error)")
            }
        }
    }

    @Test func twoHundredConcurrentRequestsAreAllAnswered() throws {
        let statuses = SynchronizedStatuses()
        var threads: [OSThread] = []
        for _ in 0..<200 {
            threads.append(try OSThread.start(stackSize: 1 << 20) {
                let status = (try? TestStack.get("/alive", client: TestStack.client(http2: false)).status) ?? -1
                statuses.append(status)
            })
        }
        for thread in threads { thread.join() }
        #expect(statuses.values.count == 200)
        #expect(statuses.values.allSatisfy { $0 == 200 }, "statuses: \(Set(statuses.values))")
    }

    @Test func aliveReports503WhileMariaDBIsDownAndRecovers() throws {
        try TestStack.stack("db-stop")
        defer { _ = try? TestStack.stack("db-start") }
        let client = try TestStack.client()
        let down = try TestStack.eventually(within: 15) { try TestStack.get("/alive", client: client).status == 503 }
        #expect(down)
        let body = try TestStack.get("/alive", client: client)
        #expect(body.json["responseCode"] == "ServiceUnavailable")
        #expect(!body.bodyText.contains("MariaDB") && !body.bodyText.contains("mysqld"))

        try TestStack.stack("db-start")
        // Every responder thread must reconnect by itself: all of a burst answer 200.
        let up = try TestStack.eventually(within: 20) {
            try (0..<20).allSatisfy { _ in try TestStack.get("/alive", client: client).status == 200 }
        }
        #expect(up)
    }

    /// A core file would hold the master key and whatever credentials a process had
    /// opened: the kernel must show every ENS process with a core size limit of zero
    /// (soft and hard), whatever limit it was started with.
    @Test func noENSProcessCanLeaveACoreFile() throws {
        func coreLimit(_ pid: pid_t) -> String? {
            let limits = (try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)) ?? ""
            return limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }
                .map { $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2).joined(separator: " ") }
        }
        let processes = ["ens-fcgi --config", "ens-fcgi --worker", "ens-sender --config"].flatMap { pattern in
            TestStack.pids(matching: pattern).map { (pattern, $0) }
        }
        #expect(Set(processes.map(\.0)).count == 3, "the supervisor, its workers and the sender all run: \(processes)")
        for (pattern, pid) in processes {
            #expect(coreLimit(pid) == "0 0", "\(pattern) (pid \(pid)): \(coreLimit(pid) ?? "no limits")")
        }
    }

    /// Under systemd, stderr is a stream to journald named by JOURNAL_STREAM: each line
    /// then carries its syslog priority for journald to file it by. Here the "journal"
    /// is a file, JOURNAL_STREAM names it, and ens-cron writes its lines into it.
    @Test func linesToTheJournalCarryTheirPriority() throws {
        let journal = TestStack.directory + "/journal-\(UUID().uuidString.prefix(8)).log"
        let cron = TestStack.root + "/.build/debug/ens-cron"
        let script = #"exec 2>"$1"; JOURNAL_STREAM=$(stat -c %d:%i "$1") exec "$2" keys --config "$3""#
        _ = try TestStack.run("/bin/sh", ["-c", script, "sh", journal, cron, TestStack.directory + "/ens.conf"])
        let lines = try String(contentsOfFile: journal, encoding: .utf8).split(separator: "\n")
        #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("<6>") || $0.hasPrefix("<5>") || $0.hasPrefix("<4>") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("<6>") && $0.contains("level=info") })
        // Not named by JOURNAL_STREAM (a file like any other): no prefix.
        let plain = journal + ".plain"
        let other = #"exec 2>"$1"; JOURNAL_STREAM=1:1 exec "$2" keys --config "$3""#
        _ = try TestStack.run("/bin/sh", ["-c", other, "sh", plain, cron, TestStack.directory + "/ens.conf"])
        let plainLines = try String(contentsOfFile: plain, encoding: .utf8).split(separator: "\n")
        #expect(!plainLines.isEmpty && plainLines.allSatisfy { $0.first?.isNumber == true }, "\(plainLines)")
    }

    /// sd_notify without libsystemd: what systemd's notification socket receives, read
    /// by Python on a real datagram socket, at a path and at an abstract address.
    @Test func theServiceManagerHearsReadyAndStopping() throws {
        for abstract in [false, true] {
            let name = TestStack.directory + "/run/notify-\(UUID().uuidString.prefix(8))"
            let address = abstract ? "@" + name : name
            let receiver = #"""
                import socket, sys
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.bind(("\0" + sys.argv[1][1:]) if sys.argv[1].startswith("@") else sys.argv[1])
                open(sys.argv[2], "w").close()
                s.settimeout(10)
                print(s.recv(4096).decode() + "|" + s.recv(4096).decode())
                """#
            let bound = name + ".bound"
            let output = SynchronizedValues<String>()
            let thread = try OSThread.start {
                output.append((try? TestStack.run("/usr/bin/env", ["python3", "-c", receiver, address, bound])) ?? "receiver failed")
            }
            #expect(TestStack.eventually(within: 10) { FileManager.default.fileExists(atPath: bound) })
            setenv("NOTIFY_SOCKET", address, 1)
            #expect(SystemdNotifier.notify("READY=1"))
            #expect(SystemdNotifier.notify("STOPPING=1"))
            unsetenv("NOTIFY_SOCKET")
            thread.join()
            #expect(output.values == ["READY=1|STOPPING=1"], "\(abstract ? "abstract" : "path"): \(output.values)")
        }
        #expect(!SystemdNotifier.notify("READY=1"), "no NOTIFY_SOCKET: nothing is sent")
        setenv("WATCHDOG_USEC", "30000000", 1)
        #expect(SystemdNotifier.watchdogInterval == .seconds(15))
        setenv("WATCHDOG_PID", "1", 1)
        #expect(SystemdNotifier.watchdogInterval == nil, "another process is watched")
        unsetenv("WATCHDOG_PID")
        unsetenv("WATCHDOG_USEC")
    }

    /// `systemctl reload` is SIGHUP: it must never stop a process (under
    /// Restart=on-failure an exit 0 would leave the service down for good). It says
    /// what it applied and which changed keys need a restart, and a file with an error
    /// is refused while the running configuration stays.
    @Test func sighupReloadsAndNeverStops() throws {
        let config = TestStack.directory + "/ens.conf"
        let original = try String(contentsOfFile: config, encoding: .utf8)
        // Written whole and renamed into place, as an editor or a package does, so a
        // reload never reads half a file.
        func write(_ text: String) throws { try text.write(toFile: config, atomically: true, encoding: .utf8) }
        defer { try? write(original) }
        let sender = try #require(TestStack.pids(matching: "ens-sender --config").first)
        let pool = try #require(TestStack.pids(matching: "ens-fcgi --config").first)
        let workers = Set(TestStack.pids(matching: "ens-fcgi --worker"))
        func log(_ name: String) -> String { (try? String(contentsOfFile: TestStack.directory + "/log/\(name).log", encoding: .utf8)) ?? "" }
        func count(_ text: String, in name: String, after offset: Int) -> Int {
            String(log(name).dropFirst(offset)).components(separatedBy: text).count - 1
        }

        var mark = (log("ens-sender").count, log("ens-fcgi").count)
        try write(original + "\npush.connections = 3\n")
        kill(sender, SIGHUP)
        kill(pool, SIGHUP)
        #expect(TestStack.eventually(within: 10) { count("restart_needed=push.connections", in: "ens-sender", after: mark.0) == 1 })
        #expect(TestStack.eventually(within: 10) { count("restart_needed=push.connections", in: "ens-fcgi", after: mark.1) == 1 + workers.count },
                "the supervisor and each worker say so")

        mark = (log("ens-sender").count, log("ens-fcgi").count)
        try write(original + "\nno.such.key = 1\n")
        kill(sender, SIGHUP)
        #expect(TestStack.eventually(within: 10) { count("configuration not reloaded", in: "ens-sender", after: mark.0) == 1 })

        mark = (log("ens-sender").count, log("ens-fcgi").count)
        try write(original)
        kill(sender, SIGHUP)
        #expect(TestStack.eventually(within: 10) { count(#"msg="configuration reloaded" applied="#, in: "ens-sender", after: mark.0) == 1 })
        Thread.sleep(forTimeInterval: 0.5)
        #expect(kill(sender, 0) == 0 && kill(pool, 0) == 0, "still running")
        #expect(Set(TestStack.pids(matching: "ens-fcgi --worker")) == workers, "no worker restarted")
        #expect(try TestStack.get("/alive").status == 200)
    }

    @Test func aKilledResponderIsReplacedWhileNginxKeepsAnswering() throws {
        let workers = TestStack.pids(matching: "ens-fcgi --worker")
        try #require(workers.count >= 2, "expected at least two worker processes, found \(workers)")
        let victim = workers[0]
        kill(victim, SIGKILL)
        let client = try TestStack.client()
        var failures: [HTTPResponse] = []
        for _ in 0..<200 {
            let response = try TestStack.get("/alive", client: client)
            if response.status != 200 { failures.append(response) }
        }
        if TestStack.front == "apache" {
            // nginx sends a request whose kept connection broke to another one; Apache's
            // mod_proxy_fcgi does not, so a request that met a connection to the killed
            // worker gets a JSON 503, which clients retry. A few at most.
            #expect(failures.count <= 3, "\(failures.count) failures")
            #expect(failures.allSatisfy { $0.status == 503 && $0.json["responseCode"] == "ServiceUnavailable" }, "\(failures.map(\.status))")
        } else {
            #expect(failures.isEmpty, "\(failures.map(\.status))")
        }
        let replaced = TestStack.eventually(within: 10) {
            let now = TestStack.pids(matching: "ens-fcgi --worker")
            return now.count == workers.count && !now.contains(victim)
        }
        #expect(replaced)
    }

    @Test func poolDownMeansJSON503FromNginx() throws {
        try TestStack.stack("fcgi-stop")
        defer { _ = try? TestStack.stack("fcgi-start") }
        let response = try TestStack.get("/alive")
        #expect(response.status == 503)
        #expect(response.json["responseCode"] == "ServiceUnavailable")
        try TestStack.stack("fcgi-start")
        #expect(try TestStack.eventually(within: 10) { try TestStack.get("/alive").status == 200 })
    }
}

/// Values collected from concurrent requests.
final class SynchronizedValues<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Value] = []
    func append(_ value: Value) { lock.withLock { storage.append(value) } }
    /// Appends only to an empty list: true for the one caller that did (a one-time trigger).
    func appendIfEmpty(_ value: Value) -> Bool {
        lock.withLock {
            guard storage.isEmpty else { return false }
            storage.append(value)
            return true
        }
    }
    /// Appends and tells how many there are now: a number no other caller gets.
    func appendCounting(_ value: Value) -> Int { lock.withLock { storage.append(value); return storage.count } }
    var values: [Value] { lock.withLock { storage } }
}

typealias SynchronizedStatuses = SynchronizedValues<Int>
