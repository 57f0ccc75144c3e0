import Curl
import Foundation
import MariaDB
import Testing

/// Apache httpd in front (scripts/test.sh's second pass, apache/): the rate limits ENS
/// applies for it (a table shared by the pool's processes; a file for CGI), the
/// mod_security2 option, and the two other ways it can reach ENS, mod_fcgid and plain
/// CGI, answering as the pool does. Each test restarts Apache as it needs and
/// leaves it as scripts/test.sh started it (mod_proxy_fcgi, the stack's high limits).
@Suite(.serialized, .enabled(if: TestStack.isRunning && TestStack.front == "apache", "needs scripts/test.sh's Apache pass"))
struct ApacheFrontTests {
    /// Restarts Apache with `environment` for scripts/stack.sh (ENS_RATE,
    /// ENS_APACHE_BACKEND), its rate counters cleared.
    static func restartApache(_ environment: [String] = []) throws {
        try TestStack.stack("apache-stop")
        let counters = TestStack.directory + "/apache/modsec"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: counters)) ?? [] {
            try FileManager.default.removeItem(atPath: counters + "/" + name)
        }
        try TestStack.run("/usr/bin/env", environment + [TestStack.root + "/scripts/stack.sh", "apache-start"])
    }

    /// A process's real user id, from /proc.
    static func uid(of pid: Int32) -> Int? {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        return status.split(separator: "\n").first { $0.hasPrefix("Uid:") }?.split(separator: "\t").dropFirst().first.flatMap { Int($0) }
    }

    static func restoreApache() {
        _ = try? restartApache()
    }

    func statuses(_ count: Int, _ request: () throws -> Int) rethrows -> [Int] {
        try (0..<count).map { _ in try request() }
    }

    /// `allowed` answers `ok`, then at most five more may still pass, then every one is
    /// `refused`. Refused requests count too. The slack: mod_security2 stores a request's
    /// count once its answer is sent, so the next request can read the count before it,
    /// and two requests that overlap in different Apache processes both read the same
    /// count and store the same next one, so an increment can be lost (it has no atomic
    /// update); on a loaded host four got through.
    func limited(_ statuses: [Int], allowed: Int, ok: Int, refused: Int = 429) -> Bool {
        let slack = 5
        return ok != refused && statuses.count > allowed + slack && statuses.prefix(allowed).allSatisfy { $0 == ok }
            && statuses.dropFirst(allowed).prefix(slack).allSatisfy { $0 == ok || $0 == refused }
            && statuses.dropFirst(allowed + slack).allSatisfy { $0 == refused }
    }

    /// Runs `body` with the pool restarted on these ens.conf lines (`limits.*`), then
    /// puts the stack's configuration and pool back.
    static func withPoolLimits(_ lines: [String: String], _ body: () throws -> Void) throws {
        let path = TestStack.directory + "/ens.conf"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        let changed = original.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            lines.first { line.hasPrefix($0.key + " =") }.map { "\($0.key) = \($0.value)" } ?? String(line)
        }.joined(separator: "\n")
        func restartPool(_ text: String) throws {
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            try TestStack.stack("fcgi-stop")
            try TestStack.stack("fcgi-start")
        }
        try restartPool(changed)
        defer { try? restartPool(original) }
        try body()
    }

    /// The limits ENS applies itself, by default behind Apache (mod_security2 off the
    /// request path): one address flooding /alive over eight connections at once,
    /// which the pool's two processes share, is held to nginx's count (burst + 1, plus
    /// what drains at 1 r/s meanwhile), not once per process; the refusals are the JSON
    /// 429; another address is not touched.
    @Test func theResponderLimitsHoldAcrossThePoolsProcesses() throws {
        try Self.withPoolLimits(["limits.api_per_second": "1", "limits.api_burst": "20"]) {
            try Self.restartApache()
            defer { Self.restoreApache() }
            let urls = (0..<60).flatMap { _ in ["--url", TestStack.baseURL + "/alive", "-o", "/dev/null"] }
            let started = Date()
            let codes = try TestStack.run("/usr/bin/curl", ["-s", "--cacert", TestStack.certificate, "--parallel", "--parallel-max", "8",
                                                            "-w", "%{http_code}\n"] + urls).split(separator: "\n")
            // What drained at 1 r/s while the flood lasted (a slow host takes longer);
            // once per process would be 42 or more.
            let drained = Int(Date().timeIntervalSince(started).rounded(.up))
            #expect(codes.count == 60)
            let passed = codes.filter { $0 == "200" }.count
            #expect(passed >= 21 && passed <= 22 + drained, "\(passed) of 60 passed in about \(drained) s: \(codes)")
            #expect(codes.allSatisfy { $0 == "200" || $0 == "429" }, "\(codes)")
            let refused = try TestStack.get("/alive")
            #expect(refused.status == 429)
            #expect(refused.json["responseCode"] == "TooManyRequests")
            #expect(refused.header("content-type")?.hasPrefix("application/json") == true)
            #expect(try TestStack.get("/alive", client: TestStack.client(from: "127.0.0.2")).status == 200, "another address")
        }
    }

    /// Plain CGI: every request is a process of its own, so the counters live in a file
    /// they all map (limits.table_file). The file holds no address.
    @Test func cgiRunsShareTheirLimitsThroughAFile() throws {
        try Self.withPoolLimits(["limits.api_per_second": "1", "limits.api_burst": "5"]) {
            try Self.restartApache(["ENS_APACHE_BACKEND=cgi"])
            defer { Self.restoreApache() }
            let table = TestStack.directory + "/run/limits-apache/limits.table"
            try? FileManager.default.removeItem(atPath: table)
            let client = try TestStack.client()
            let statuses = try statuses(12) { try TestStack.get("/alive", client: client).status }
            let passed = statuses.filter { $0 == 200 }.count
            #expect(passed >= 6 && passed <= 8 && statuses.last == 429, "\(statuses)")
            #expect(try TestStack.get("/alive", client: TestStack.client(from: "127.0.0.2")).status == 200, "another address")
            let bytes = try Data(contentsOf: URL(fileURLWithPath: table))
            #expect(bytes.range(of: Data("127.0.0.1".utf8)) == nil)
            let mode = try #require(try FileManager.default.attributesOfItem(atPath: table)[.posixPermissions] as? Int)
            #expect(mode == 0o600)
        }
    }

    /// ENS_RATE=20 gives 20 device-API requests per address in 5 s, 10 record creations
    /// per address in 60 s, 20 Exchange callbacks and 20 Graph notifications per
    /// callback URL and 200 of each per address in 10 s.
    @Test func rateLimitsAnswerJSON429PerAddressAndPerSubscription() throws {
        try Self.restartApache(["ENS_RATE=20", "ENS_APACHE_MODSEC=1"])
        defer { Self.restoreApache() }
        let client = try TestStack.client()
        // /getpublickey: 10, then refused, though the address is under its API limit.
        let creations = try statuses(16) { try TestStack.post("/getpublickey", body: Array("{}".utf8),
                                                              contentType: "application/json", client: client).status }
        #expect(limited(creations, allowed: 10, ok: 401), "\(creations)")
        // The API limit counted those 16 too: 4 more requests, then refused.
        let alive = try statuses(10) { try TestStack.get("/alive", client: client).status }
        #expect(limited(alive, allowed: 4, ok: 200), "\(alive)")
        let refused = try TestStack.get("/alive", client: client)
        #expect(refused.json["responseCode"] == "TooManyRequests")
        #expect(refused.header("content-type") == "application/json")

        // Callbacks: per callback URL, so one busy subscription does not hold up the
        // others that Exchange sends from the same address; and a forged path fills a
        // counter of its own: the same record id in another URL is not refused.
        func callback(_ path: String) throws -> Int {
            try TestStack.post(path, body: Array("<x/>".utf8), contentType: "text/xml", client: client).status
        }
        let busy = try statuses(30) { try callback("/ews/4242/1/AAAA") }
        #expect(limited(busy, allowed: 20, ok: 403), "\(busy)")
        #expect(try callback("/ews/4242/1/AAAB") == 403)
        // And per address far above that: 200 in 10 s (31 so far), whichever URL.
        let spread = try (0..<180).map { try callback("/ews/\(5000 + $0)/1/AAAA") }
        #expect(limited(spread, allowed: 169, ok: 403), "\(spread.suffix(12))")

        // Graph notifications: per subscription as well, with counters of their own, and
        // refused with a JSON 503, not a 429: Graph backs off from an endpoint that answers
        // 4xx and retries 5xx. (What ENS answers below the limit is its business here.)
        let graph = try statuses(30) {
            try TestStack.post("/graph/4242/1/AAAA", body: Array("{}".utf8), contentType: "application/json", client: client).status
        }
        #expect(limited(graph, allowed: 20, ok: graph[0], refused: 503), "\(graph)")
        let held = try TestStack.post("/graph/4242/1/AAAA", body: Array("{}".utf8), contentType: "application/json", client: client)
        #expect(held.json["responseCode"] == "ServiceUnavailable")
        #expect(try TestStack.post("/graph/4242/1/AAAB", body: Array("{}".utf8), contentType: "application/json", client: client).status == graph[0])
        // The sealed form (`r2.`) is limited too, per URL.
        let sealed = try statuses(30) {
            try TestStack.post("/graph/r2.AAAA", body: Array("{}".utf8), contentType: "application/json", client: client).status
        }
        #expect(limited(sealed, allowed: 20, ok: graph[0], refused: 503), "\(sealed)")
    }

    /// The attack on the per-subscription limit, through Apache: forged posts at a real
    /// subscription's record id (ids are sequential) used to share its counter, so
    /// Exchange's real callbacks were refused and the subscription lapsed. Counters are
    /// per callback URL now: the flood is refused, the real callback delivers.
    @Test func forgedPostsAtARecordIDDoNotThrottleItsSubscription() throws {
        let api = try DeviceClient(token: try TestStack.newToken("apache-forged-callbacks"))
        let registered = try RegisteredUser.register(with: api)
        let database = try TestStack.serviceConnection()
        let row = try #require(try database.queryOne("SELECT id, generation FROM EnsSubscriptionInfo WHERE userid = \(registered.user.userID)"))
        let (recordID, generation) = try row.decode(Int64.self, Int64.self)
        try Self.restartApache(["ENS_RATE=20", "ENS_APACHE_MODSEC=1"])
        defer { Self.restoreApache() }
        let client = try TestStack.client()
        let forged = "/ews/\(recordID)/\(generation)/k." + String(repeating: "A", count: 64)
        let flood = try statuses(30) { try TestStack.post(forged, body: Array("<x/>".utf8), contentType: "text/xml", client: client).status }
        #expect(limited(flood, allowed: 20, ok: 403), "\(flood)")
        let callbacks = try ExchangeSimulator.newMail(registered.user.email, subject: "Despite the flood via Apache", fromName: "Ann")
        #expect(callbacks.first?["httpStatus"] as? Int == 200, "\(callbacks)")
        #expect(callbacks.first?["subscriptionStatus"] as? String == "OK", "\(callbacks)")
        #expect(TestStack.eventually(within: 20) { !registered.pushes(to: registered.token, subject: "Despite the flood via Apache").isEmpty })
        // The counters live on disk (SecDataDir) and are named by the path's hash: the
        // URL's secret part is in none of their files.
        let url = try #require(try ExchangeSimulator.subscriptions(of: registered.user.email).last?["url"] as? String)
        let secret = try #require(url.components(separatedBy: "/ews/k2.").last)
        let counters = TestStack.directory + "/apache/modsec"
        let files = try FileManager.default.contentsOfDirectory(atPath: counters)
        #expect(!files.isEmpty)
        for name in files {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: counters + "/" + name))
            #expect(bytes.range(of: Data(secret.prefix(40).utf8)) == nil, "\(name) holds the callback URL")
        }
    }

    /// mod_fcgid starts ens-fcgi itself (the listening socket on descriptor 0), and plain
    /// CGI starts it per request: both answer as the pool does, and leave no process.
    /// As root (CI), both start it through the real suexec as a user of its own (the
    /// stack's stand-in for `ens`: nobody, beside Apache's www-data): the processes do
    /// not run as Apache's user, and Apache's user cannot read the master key, so nothing
    /// else Apache runs could. (Not root: Apache cannot switch users; everything runs as
    /// the developer, and only the answers are compared.)
    @Test func fcgidAndCGIAnswerAsThePoolDoes() throws {
        let api = try DeviceClient(token: try TestStack.newToken("apache-backends"))
        let user = try api.newUser()
        let known = #"{"userid":"\#(user.userID)"}"#
        func answers() throws -> [String] {
            let client = try TestStack.client()
            let key = try TestStack.post("/getpublickey", body: Array(known.utf8), contentType: "application/json",
                                         headers: [("ApiToken", api.token)], client: client)
            let post = try TestStack.post("/alive", body: [], contentType: nil, client: client)
            return ["\(try TestStack.get("/alive", client: client).bodyText)", "\(key.status) \(key.bodyText)",
                    "\(post.status) \(post.header("allow") ?? "") \(post.bodyText)", "\(try TestStack.get("/nowhere", client: client).status)",
                    "\(try TestStack.post("/ews/1/1/AAAA", body: Array("<x/>".utf8), contentType: "text/xml", client: client).status)"]
        }
        let pool = try answers()
        #expect(pool[1].hasPrefix("200 ") && pool[1].contains("BEGIN PUBLIC KEY"))
        defer { Self.restoreApache() }
        let asRoot = getuid() == 0
        let suexecLog = "/var/log/apache2/suexec.log"
        func suexecStarts(_ starter: String) -> Int {
            ((try? String(contentsOfFile: suexecLog, encoding: .utf8)) ?? "").split(separator: "\n")
                .filter { $0.contains("uid: (65534/nobody) gid: (65534/nogroup) cmd: \(starter)") }.count
        }
        for backend in ["fcgid", "cgi"] {
            let starter = backend == "fcgid" ? "ens-fcgid-starter" : "ens-cgi-starter"
            let startsBefore = suexecStarts(starter)
            try Self.restartApache(["ENS_APACHE_BACKEND=\(backend)"])
            #expect(try answers() == pool, "\(backend)")
            if backend == "fcgid" {
                let processes = TestStack.pids(matching: "--inherit-socket")
                #expect(!processes.isEmpty, "mod_fcgid started no ens-fcgi")
                if asRoot {
                    #expect(processes.allSatisfy { Self.uid(of: $0) == 65534 }, "ens-fcgi runs as \(processes.map { Self.uid(of: $0) ?? -1 })")
                }
            }
            if asRoot {
                #expect(suexecStarts(starter) > startsBefore, "suexec did not start \(starter) as nobody:nogroup")
                // Apache's user cannot read what ENS reads.
                let master = TestStack.directory + "/secrets/master.key"
                #expect(throws: (any Error).self, "www-data can read the master key") {
                    try TestStack.run("/usr/sbin/runuser", ["-u", "www-data", "--", "/usr/bin/head", "-c1", master])
                }
            }
        }
        try TestStack.stack("apache-stop")
        #expect(TestStack.eventually(within: 10) { TestStack.pids(matching: "ens-apache.conf").isEmpty }, "an ens-fcgi outlived Apache")
    }
}
