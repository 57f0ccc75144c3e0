import Curl
import Foundation

/// The APNs simulator the test stack runs (Tests/tools/apns_simulator.py): its control
/// port and the record of every push it accepted.
enum APNsSimulator {
    static var controlURL: String { "http://127.0.0.1:\(Int(TestStack.port)! + 2)" }
    static var recordPath: String { TestStack.directory + "/sim/apns-accepted.jsonl" }

    struct Accepted {
        let token: String
        let collapseID: String?
        let topic: String
        let pushType: String?
        let priority: Int?
        let payload: [String: Any]
        let jwt: String
        /// "token" (JWT) or "certificate" (TLS client certificate).
        let auth: String
    }

    static func control(_ path: String, _ body: [String: Any]? = nil) throws -> [String: Any] {
        try SimulatorControl.call(controlURL + path, body)
    }

    static func fail(token: String, status: Int, reason: String, count: Int = 0) throws {
        _ = try control("/fail", ["token": token, "status": status, "reason": reason, "count": count])
    }

    static func stats() throws -> [String: Any] { try control("/stats") }

    /// Everything accepted so far.
    static func accepted() -> [Accepted] { record.all() }

    private static let record = JSONLinesRecord<Accepted>(path: { recordPath }) { object in
        Accepted(
            token: object["token"] as? String ?? "", collapseID: object["collapse_id"] as? String,
            topic: object["topic"] as? String ?? "", pushType: object["push_type"] as? String,
            priority: object["priority"] as? Int, payload: object["payload"] as? [String: Any] ?? [:],
            jwt: object["jwt"] as? String ?? "", auth: object["auth"] as? String ?? ""
        )
    }
}

/// A simulator's control API: JSON over plain HTTP/1.1 on loopback (GET without a body,
/// POST with one); the answer's JSON object, empty when it is not one.
enum SimulatorControl {
    static func call(_ url: String, _ body: [String: Any]?, timeout: Duration = .seconds(10)) throws -> [String: Any] {
        let client = try HTTPClient(configuration: HTTPClientConfiguration(totalTimeout: timeout, preferHTTP2: false))
        let request = body.map { HTTPRequest(method: .post, url: url, headers: [("Content-Type", "application/json")],
                                             body: Array(try! JSONSerialization.data(withJSONObject: $0))) }
            ?? HTTPRequest(method: .get, url: url)
        let response = try client.send(request)
        return (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
    }

    /// A GET whose answer may be any JSON value (a list of records, say); nil if not JSON.
    static func fetch(_ url: String) throws -> Any? {
        let client = try HTTPClient(configuration: HTTPClientConfiguration(preferHTTP2: false))
        return try? JSONSerialization.jsonObject(with: Data(try client.send(HTTPRequest(method: .get, url: url)).body))
    }
}
