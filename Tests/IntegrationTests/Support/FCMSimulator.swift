import Curl
import Foundation

/// The FCM simulator the test stack runs (Tests/tools/fcm_simulator.py): its control
/// port and the record of every message it accepted.
enum FCMSimulator {
    static var controlURL: String { "http://127.0.0.1:\(Int(TestStack.port)! + 7)" }
    static var recordPath: String { TestStack.directory + "/sim/fcm-accepted.jsonl" }

    struct Accepted {
        /// Wall-clock milliseconds when the simulator accepted it.
        let time: Int64
        let token: String
        let message: [String: Any]

        var android: [String: Any] { message["android"] as? [String: Any] ?? [:] }
        var notification: [String: String] { message["notification"] as? [String: String] ?? [:] }
        var data: [String: String] { message["data"] as? [String: String] ?? [:] }
        var collapseKey: String? { android["collapse_key"] as? String }
    }

    @discardableResult
    static func control(_ path: String, _ body: [String: Any]? = nil) throws -> [String: Any] {
        try SimulatorControl.call(controlURL + path, body)
    }

    /// The next `count` messages to `token` (0: every one until reset) get `status`
    /// with Google's error body naming `errorCode`.
    static func fail(token: String, status: Int, errorCode: String, retryAfter: Int? = nil, count: Int = 0) throws {
        var body: [String: Any] = ["token": token, "status": status, "error_code": errorCode, "count": count]
        if let retryAfter { body["retry_after"] = retryAfter }
        try control("/fail", body)
    }

    static func reset() throws { try control("/reset", [:]) }
    static func stats() throws -> [String: Any] { try control("/stats") }
    /// Access tokens issued by the simulator's token endpoint so far.
    static func tokensIssued() throws -> Int { try stats()["tokens_issued"] as? Int ?? -1 }

    /// Everything accepted so far.
    static func accepted() -> [Accepted] { record.all() }

    private static let record = JSONLinesRecord<Accepted>(path: { recordPath }) { object in
        guard let message = object["message"] as? [String: Any] else { return nil }
        return Accepted(time: (object["time"] as? NSNumber)?.int64Value ?? 0, token: object["token"] as? String ?? "", message: message)
    }
}
