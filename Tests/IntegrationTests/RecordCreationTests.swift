import Curl
import Foundation
import MariaDB
import OpenSSL
import Testing

/// /getpublickey creates a user record for any address, so it is what someone holding
/// the app's ApiToken would use to fill the database or the CPU. New records come from
/// the key pool or not at all (503), are counted per token (429 past the quota: 100 an
/// hour in the test stack), and callback URLs never reach the web server's logs.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct RecordCreationTests {
    let database: Connection

    init() throws {
        database = try TestStack.serviceConnection()
    }

    @Test func anEmptyKeyPoolTurnsNewUsersAwayInsteadOfGeneratingKeys() throws {
        let api = try DeviceClient(token: try TestStack.newToken("record-creation-pool"))
        let known = try api.newUser(email: "known-\(UUID().uuidString.prefix(8))@example.test")
        try TestStack.stack("keys-stop")
        defer { _ = try? TestStack.stack("keys-start") }
        try database.execute("DELETE FROM KeyPool")
        let refused = try api.call("/getpublickey", ["email": "nokey-\(UUID().uuidString.prefix(8))@example.test"])
        #expect(refused.status == 503)
        #expect(refused.json["responseCode"] == "ServiceUnavailable")
        #expect(refused.header("Retry-After") != nil)
        // A refusal makes no record, so it takes none of the token's hourly quota: devices
        // retrying through the outage must not lock new users out once the pool refills.
        let createdBefore = try quotaUsed(by: api.token)
        for _ in 0..<5 {
            #expect(try api.call("/getpublickey", ["email": "retry-\(UUID().uuidString.prefix(8))@example.test"]).status == 503)
        }
        #expect(try quotaUsed(by: api.token) == createdBefore)
        // An existing user still gets their key.
        #expect(try api.call("/getpublickey", ["userid": known.userID]).json["pubKey"] == known.publicKeyPEM)
        try TestStack.stack("keys-start")
        let email = "later-\(UUID().uuidString.prefix(8))@example.test"
        #expect(try TestStack.eventually(within: 30) { try api.call("/getpublickey", ["email": email]).status == 200 })
    }

    private func quotaUsed(by token: String) throws -> Int {
        try database.queryOne("SELECT created FROM RecordQuota WHERE token_hash = \(Digest.sha256(token))").map { try $0.decode(Int.self) } ?? 0
    }

    @Test func eachTokenCreatesAtMostItsQuotaOfRecordsPerHour() throws {
        let token = try TestStack.newToken("record-creation-quota")
        let api = try DeviceClient(token: token)
        // 99 of the hour's 100 already used by this token.
        try database.execute("""
            INSERT INTO RecordQuota (token_hash, window_started_at, created) VALUES (\(Digest.sha256(token)), NOW(3), 99)
            ON DUPLICATE KEY UPDATE window_started_at = NOW(3), created = 99
            """)
        let last = try api.call("/getpublickey", ["email": "quota-last-\(UUID().uuidString.prefix(8))@example.test"])
        #expect(last.status == 200)
        let over = try api.call("/getpublickey", ["email": "quota-over-\(UUID().uuidString.prefix(8))@example.test"])
        #expect(over.status == 429)
        #expect(over.json["responseCode"] == "TooManyRequests")
        #expect(over.header("Retry-After") != nil)
        // Existing users are not new records: still served. Another token is not affected.
        let known = try api.call("/getpublickey", ["userid": last.json["userid"] ?? ""])
        #expect(known.status == 200)
        let other = try DeviceClient(token: try TestStack.newToken("record-creation-other"))
        #expect(try other.call("/getpublickey", ["email": "quota-other-\(UUID().uuidString.prefix(8))@example.test"]).status == 200)
        // A new hour starts afresh.
        try database.execute("UPDATE RecordQuota SET window_started_at = NOW(3) - INTERVAL 2 HOUR WHERE token_hash = \(Digest.sha256(token))")
        #expect(try api.call("/getpublickey", ["email": "quota-next-\(UUID().uuidString.prefix(8))@example.test"]).status == 200)
    }

    /// Callback paths carry a sealed token: the web server in front (nginx, or Apache in
    /// scripts/test.sh's second pass) writes none of them to any of its logs, not even for a
    /// request it refuses itself (a body over the limit) or one ENS refuses.
    @Test func callbackURLsNeverReachTheWebServersLogs() throws {
        let marker = "LOGMARKER" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let forged = "/ews/12345/1/\(marker)"
        let refused = try TestStack.post(forged, body: Array("<x/>".utf8), contentType: "text/xml; charset=utf-8")
        #expect(refused.status == 403)
        // Over HTTP/1.1: Apache answers an oversized HTTP/2 upload with its 413 and then
        // RST_STREAM(NO_ERROR) (RFC 9113, 8.1), which libcurl 7.88 reports as an error.
        let large = try TestStack.post(forged + "A", body: [UInt8](repeating: 0x41, count: 2 << 20), contentType: "text/xml; charset=utf-8",
                                       client: TestStack.client(http2: false))
        #expect(large.status == 413)
        #expect(try TestStack.get(forged + "B").status == 405)
        // A device-API request is logged as usual, so the logs are live.
        _ = try TestStack.get("/alive?\(marker)-device")
        Thread.sleep(forTimeInterval: 1.5)  // nginx flushes its access log every second
        let logs = try FileManager.default.contentsOfDirectory(atPath: TestStack.directory + "/log").filter { $0.hasPrefix(TestStack.front) }
        #expect(!logs.isEmpty)
        var sawDeviceLine = false
        for name in logs {
            let text = (try? String(contentsOfFile: TestStack.directory + "/log/" + name, encoding: .utf8)) ?? ""
            sawDeviceLine = sawDeviceLine || text.contains("\(marker)-device")
            let leaked = text.components(separatedBy: "\n").filter { $0.contains(marker) && !$0.contains("\(marker)-device") }
            #expect(leaked.isEmpty, "\(name): \(leaked.prefix(2))")
        }
        #expect(sawDeviceLine)
    }
}
