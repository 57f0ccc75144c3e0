import ENSKitCurl
import Foundation
import Testing
@testable import ENSKit

/// The private stack scripts/enskit-test.sh starts (var/enskit, port 24443): ENS behind
/// nginx with the Exchange, Graph, APNs and FCM simulators. The tests are enabled only
/// when the script says where it is.
enum Stack {
    static let environment = ProcessInfo.processInfo.environment
    static let directory = environment["ENSKIT_STACK_VAR"] ?? ""
    static let port = Int(environment["ENSKIT_STACK_PORT"] ?? "") ?? 0
    static let apiToken = environment["ENSKIT_STACK_TOKEN"] ?? ""
    static var isUp: Bool { !directory.isEmpty && port > 0 && !apiToken.isEmpty }

    static var transport: CurlTransport { CurlTransport(caFile: directory + "/tls/server.crt") }

    /// A client as one device has it: its own key store.
    static func client(bundleID: String = "com.example.mail", keyStore: MemoryKeyStore = MemoryKeyStore(), apiToken: String? = nil,
                       baseURL: String? = nil) throws -> ENSClient {
        let url = try #require(URL(string: baseURL ?? "https://localhost:\(port)"))
        return ENSClient(configuration: ENSConfiguration(baseURL: url, apiToken: apiToken ?? self.apiToken, bundleID: bundleID, badge: true),
                         transport: transport, keyStore: keyStore)
    }

    /// A simulator's control API (plain HTTP on loopback): `offset` from the stack's
    /// port (APNs +2, Exchange +4, FCM +7, Graph +9).
    @discardableResult
    static func control(_ offset: Int, _ path: String, _ body: [String: Any]) async throws -> [String: Any] {
        let url = try #require(URL(string: "http://127.0.0.1:\(port + offset)\(path)"))
        let request = ENSHTTPRequest(method: "POST", url: url, headers: ["Content-Type": "application/json"],
                                     body: try JSONSerialization.data(withJSONObject: body))
        let response = try await CurlTransport(timeout: .seconds(60)).send(request)
        try #require(response.status == 200, "\(path): \(response.status)")
        return (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
    }

    static let exchange = 4
    static let apns = 2
    static let graph = 9

    /// Every push the APNs simulator accepted for `token`, oldest first (payloads).
    static func apnsPayloads(to token: ENSPushToken) -> [[String: Any]] {
        records("apns-accepted.jsonl").filter { $0["token"] as? String == token.value }.compactMap { $0["payload"] as? [String: Any] }
    }

    /// Every FCM message's `data` for `token`, oldest first.
    static func fcmData(to token: ENSPushToken) -> [[String: String]] {
        records("fcm-accepted.jsonl").compactMap { $0["message"] as? [String: Any] }
            .filter { $0["token"] as? String == token.value }.compactMap { $0["data"] as? [String: String] }
    }

    private static func records(_ name: String) -> [[String: Any]] {
        guard let text = try? String(contentsOfFile: directory + "/sim/" + name, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
    }

    /// Polls `condition` for up to `seconds`.
    static func eventually(within seconds: Double = 20, _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try? await Task.sleep(nanoseconds: 200_000_000)
        }
        return try await condition()
    }

    /// A random APNs token (32 bytes).
    static func apnsToken() throws -> ENSPushToken {
        try ENSPushToken(apnsHex: (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined())
    }

    /// An FCM registration token of today's shape.
    static func fcmToken() throws -> ENSPushToken {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let part = { (count: Int) in String((0..<count).compactMap { _ in alphabet.randomElement() }) }
        return try ENSPushToken(fcmToken: part(22) + ":APA91b" + part(134))
    }

    static func unique(_ prefix: String) -> String { "\(prefix)\(UUID().uuidString.prefix(8).lowercased())" }

    /// A mailbox at the Exchange simulator's pox.test (POX Autodiscover) with a password.
    static func passwordMailbox() async throws -> (user: ENSUser, credentials: ENSCredentials) {
        try await control(exchange, "/domains", ["domain": "pox.test", "mode": "pox-root"])
        let email = unique("k") + "@pox.test"
        let password = "Pa55-" + UUID().uuidString.prefix(8)
        try await control(exchange, "/mailboxes", ["email": email, "userName": email, "password": password])
        return (ENSUser(email: email), .password(userName: email, password: password))
    }

    /// New mail in a simulated Exchange mailbox; answers once ENS answered the callback.
    static func newMail(_ user: ENSUser, subject: String, from sender: String) async throws {
        try await control(exchange, "/newmail", ["email": user.email ?? "", "subject": subject, "fromName": sender,
                                                 "fromAddress": "ann@elsewhere.test", "wait": true])
    }
}
