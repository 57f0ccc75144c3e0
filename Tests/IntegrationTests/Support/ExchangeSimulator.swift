import Curl
import Foundation

/// The Exchange simulator the test stack runs (Tests/tools/ews_simulator.py): mailboxes,
/// Autodiscover behaviour per domain, failure injection, and the callbacks it sends.
enum ExchangeSimulator {
    static var controlURL: String { "http://127.0.0.1:\(Int(TestStack.port)! + 4)" }

    @discardableResult
    static func control(_ path: String, _ body: [String: Any]? = nil) throws -> [String: Any] {
        // New mail with `wait` answers only once ENS has answered the callbacks.
        try SimulatorControl.call(controlURL + path, body, timeout: .seconds(60))
    }

    static func list(_ path: String) throws -> [[String: Any]] {
        let value = try SimulatorControl.fetch(controlURL + path)
        if let array = value as? [[String: Any]] { return array }
        return (value as? [String: Any])?[path.dropFirst().description] as? [[String: Any]] ?? []
    }

    /// Creates a mailbox; returns the simulator's answer (a PKCS#12 for certificate mailboxes).
    @discardableResult
    static func mailbox(_ email: String, userName: String? = nil, password: String? = nil, oauthToken: String? = nil,
                        certificate: Bool = false, certificateKind: String? = nil,
                        versions: [String]? = nil, unread: Int = 0) throws -> [String: Any] {
        var body: [String: Any] = ["email": email, "unread": unread]
        if let userName { body["userName"] = userName }
        if let password { body["password"] = password }
        if let oauthToken { body["oauthToken"] = oauthToken }
        if certificate { body["certificate"] = true }
        if let certificateKind { body["certificate"] = certificateKind }
        if let versions { body["versions"] = versions }
        return try control("/mailboxes", body)
    }

    /// A mailbox whose user signs in with a client certificate of `kind` (ec, rsa2048,
    /// rsa4096, rsa2048-chain): the issued PKCS#12 (base64) and its password, both
    /// remembered as secrets the scan must never find.
    static func certificateMailbox(_ email: String, kind: String = "ec") throws -> (pkcs12: String, password: String) {
        let issued = try mailbox(email, certificateKind: kind)
        guard let pkcs12 = issued["pkcs12"] as? String, let password = issued["pkcs12Password"] as? String else {
            throw StackError(message: "the Exchange simulator issued no certificate for \(kind)")
        }
        TestSecrets.remember(pkcs12)
        TestSecrets.remember(password)
        return (pkcs12, password)
    }

    static func domain(_ domain: String, mode: String, target: String? = nil) throws {
        var body: [String: Any] = ["domain": domain, "mode": mode]
        if let target { body["target"] = target }
        try control("/domains", body)
    }

    static func fail(_ operation: String, status: Int? = nil, responseCode: String? = nil, delayMs: Int? = nil, count: Int = 0) throws {
        var body: [String: Any] = ["operation": operation, "count": count]
        if let status { body["status"] = status }
        if let responseCode { body["responseCode"] = responseCode }
        if let delayMs { body["delayMs"] = delayMs }
        try control("/fail", body)
    }

    static func reset() throws { try control("/reset", [:]) }

    /// New mail for a mailbox; returns the callback outcomes of the first attempt.
    static func newMail(_ email: String, subject: String, fromName: String, count: Int = 1) throws -> [[String: Any]] {
        let answer = try control("/newmail", ["email": email, "subject": subject, "fromName": fromName,
                                              "fromAddress": "sender@elsewhere.test", "count": count, "wait": true])
        return answer["callbacks"] as? [[String: Any]] ?? []
    }

    static func heartbeat(_ email: String) throws -> [[String: Any]] {
        try control("/heartbeat", ["email": email, "wait": true])["callbacks"] as? [[String: Any]] ?? []
    }

    static func subscriptions(of email: String) throws -> [[String: Any]] {
        try list("/subscriptions").filter { ($0["email"] as? String)?.lowercased() == email.lowercased() }
    }

    static func requests() throws -> [[String: Any]] {
        try list("/requests")
    }

    static func violations() throws -> [String] {
        (try SimulatorControl.fetch(controlURL + "/requests") as? [String: Any])?["violations"] as? [String] ?? []
    }
}
