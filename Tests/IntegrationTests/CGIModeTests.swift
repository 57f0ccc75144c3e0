import Curl
import Foundation
import MariaDB
import Testing

/// ens-fcgi started as a CGI program, as a web server starts one (RFC 3875): the request
/// in the environment and on standard input, the answer on standard output, then exit.
/// Every answer is compared with the same request's answer through nginx and the pool.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct CGIModeTests {
    let api: DeviceClient

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("cgi-tests"))
    }

    struct Answer {
        let status: Int
        let headers: [String: String]
        let body: String
        let exitStatus: Int32
        let seconds: Double
    }

    /// Runs the binary as Apache's mod_cgi would for `path` (a ScriptAlias of `/`).
    func cgi(_ method: String, _ path: String, body: String = "", contentType: String? = nil, apiToken: String? = nil,
             contentLength: String? = nil) throws -> Answer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestStack.root + "/.build/debug/ens-fcgi")
        var environment = [
            "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.1", "SERVER_SOFTWARE": "Apache/2.4",
            "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": path, "QUERY_STRING": "",
            "REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": contentLength ?? "\(body.utf8.count)",
            "ENS_CONFIG": TestStack.directory + "/ens.conf", "PATH": "/usr/bin:/bin",
        ]
        if let contentType { environment["CONTENT_TYPE"] = contentType }
        if let apiToken { environment["HTTP_APITOKEN"] = apiToken }
        process.environment = environment
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        let started = Date()
        try process.run()
        input.fileHandleForWriting.write(Data(body.utf8))
        try input.fileHandleForWriting.close()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        _ = errors.fileHandleForReading.readDataToEndOfFile()
        let text = String(decoding: bytes, as: UTF8.self)
        let parts = text.components(separatedBy: "\r\n\r\n")
        var headers: [String: String] = [:]
        for line in (parts.first ?? "").components(separatedBy: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Answer(status: Int(headers["status"]?.prefix(3) ?? "") ?? 0, headers: headers,
                      body: parts.dropFirst().joined(separator: "\r\n\r\n"), exitStatus: process.terminationStatus,
                      seconds: Date().timeIntervalSince(started))
    }

    func same(_ answer: Answer, _ response: HTTPResponse, _ what: String) {
        #expect(answer.status == response.status, "\(what): status")
        #expect(answer.body == response.bodyText, "\(what): body")
        #expect(answer.exitStatus == 0, "\(what): exit status")
        if answer.status != 200 || what.hasPrefix("alive") { #expect(answer.headers["content-type"] == response.header("content-type"), "\(what)") }
    }

    @Test func answersAreThePoolsByteForByte() throws {
        same(try cgi("GET", "/alive"), try TestStack.get("/alive"), "alive")
        let user = try api.newUser()
        let json = #"{"userid":"\#(user.userID)"}"#
        let viaNginx = try TestStack.post("/getpublickey", body: Array(json.utf8),
                                          contentType: "application/json", headers: [("ApiToken", api.token)])
        let viaCGI = try cgi("POST", "/getpublickey", body: json, contentType: "application/json", apiToken: api.token)
        same(viaCGI, viaNginx, "getpublickey")
        #expect(viaCGI.body.contains("BEGIN PUBLIC KEY"))
        // The shared checks, in their order.
        same(try cgi("POST", "/getpublickey", body: json, contentType: "application/json"),
             try TestStack.post("/getpublickey", body: Array(json.utf8), contentType: "application/json"), "no token")
        same(try cgi("POST", "/getpublickey", body: "{\"userid\":", contentType: "application/json", apiToken: api.token),
             try TestStack.post("/getpublickey", body: Array("{\"userid\":".utf8),
                                contentType: "application/json", headers: [("ApiToken", api.token)]),
             "malformed")
        same(try cgi("POST", "/getpublickey", body: json, contentType: "text/plain", apiToken: api.token),
             try TestStack.post("/getpublickey", body: Array(json.utf8), contentType: "text/plain", headers: [("ApiToken", api.token)]), "media type")
        let tooBig = try cgi("POST", "/getpublickey", body: "", contentType: "application/json", apiToken: api.token, contentLength: "70000")
        #expect(tooBig.status == 413 && tooBig.exitStatus == 0)
        let unknown = try cgi("POST", "/nowhere")
        #expect(unknown.status == 404 && unknown.body.contains("NotFound"))
        let wrongMethod = try cgi("GET", "/getpublickey")
        #expect(wrongMethod.status == 405 && wrongMethod.headers["allow"] == "POST")
    }

    /// A v1 check-in (of a record with a device of the original contract, the only
    /// kind it keeps alive) is in the database once the CGI program has answered.
    @Test func aCheckInIsWrittenBeforeTheProgramExits() throws {
        let user = try api.newUser()
        let database = try TestStack.serviceConnection()
        try user.pretendSubscribed(database: database, oauthToken: "cgi-oauth")
        let registered = try api.call("/registerdevicev2", [
            "userid": user.userID, "email": user.email, "bundleid": "com.example.mail",
            "creds": try user.sealJSON(["apnsToken": TestSecrets.apnsToken(), "oauthAccessToken": "cgi-oauth"]),
        ])
        #expect(registered.json["responseCode"] == "UserUpdated", "\(registered.bodyText)")
        try database.execute("UPDATE EnsSubscriptionInfo SET last_checkin_at = NULL WHERE userid = \(user.userID)")
        let answer = try cgi("POST", "/getsubscriptionstatus", body: "userid=\(user.userID)", contentType: "application/x-www-form-urlencoded",
                             apiToken: api.token)
        #expect(answer.status == 200 && answer.body.contains("UserSubscribed"), "\(answer.body)")
        #expect(try database.queryOne("SELECT last_checkin_at IS NOT NULL FROM EnsSubscriptionInfo WHERE userid = \(user.userID)")?.int(0) == 1)
    }

    /// ens-fcgi processes started without flags: CGI runs (the pool always has --config).
    static func cgiProcesses() -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { Int32($0) }.filter { pid in
            guard let raw = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            let arguments = raw.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            return arguments.count == 1 && arguments[0].hasSuffix("/ens-fcgi")
        }
    }

    @Test func theProgramEndsAndLeavesNothingBehind() throws {
        let before = Self.cgiProcesses().count
        for _ in 0..<5 {
            let answer = try cgi("GET", "/alive")
            #expect(answer.exitStatus == 0 && answer.status == 200)
            // One request costs a process start, a config read and a database connection: well under a second here.
            #expect(answer.seconds < 5)
        }
        #expect(Self.cgiProcesses().count == before)
        // A configuration it cannot use: exit 1 and nothing on standard output, which a
        // web server turns into its own 500.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestStack.root + "/.build/debug/ens-fcgi")
        process.environment = ["GATEWAY_INTERFACE": "CGI/1.1", "REQUEST_METHOD": "GET", "PATH_INFO": "/alive", "ENS_CONFIG": "/nonexistent/ens.conf"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = Pipe()
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 1)
        #expect(output.fileHandleForReading.readDataToEndOfFile().isEmpty)
    }
}
