import Curl
import Foundation
import Testing

/// The Microsoft Graph simulator the test stack runs (Tests/tools/graph_simulator.py):
/// users of two tenants (contoso.test, fabrikam.test), delegated tokens, new mail,
/// lifecycle events, failure injection and what it saw.
enum GraphSimulator {
    static var controlURL: String { "http://127.0.0.1:\(Int(TestStack.port)! + 9)" }
    static let contoso = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001"
    static let fabrikam = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0002"

    @discardableResult
    static func control(_ path: String, _ body: [String: Any]? = nil) throws -> [String: Any] {
        // New mail with `wait` answers once ENS has answered the first attempts.
        try SimulatorControl.call(controlURL + path, body, timeout: .seconds(60))
    }

    static func list(_ path: String) throws -> [[String: Any]] {
        try SimulatorControl.fetch(controlURL + path) as? [[String: Any]] ?? []
    }

    static func reset() throws { try control("/reset", [:]) }
    static func stats() throws -> [String: Any] { try control("/stats") }
    static func violations() throws -> [String] {
        (try SimulatorControl.fetch(controlURL + "/violations") as? [Any])?.map { "\($0)" } ?? []
    }

    /// A user in a tenant; returns its object id.
    @discardableResult
    static func user(_ mail: String, tenant: String = contoso) throws -> String {
        try control("/users", ["tenant": tenant, "mail": mail, "displayName": "Graph User"])["id"] as? String ?? ""
    }

    /// A delegated access token for the user, remembered for the secret scan.
    static func userToken(_ mail: String, lifetime: Int = 3600) throws -> String {
        let token = try control("/user-token", ["mail": mail, "lifetimeSeconds": lifetime])["access_token"] as? String ?? ""
        TestSecrets.remember(token)
        return token
    }

    /// New mail; returns the first attempts' outcomes.
    static func newMail(_ mail: String, subject: String, fromName: String = "Ann Example",
                        count: Int = 1, wait: Bool = true) throws -> [[String: Any]] {
        let answer = try control("/newmail", ["mail": mail, "subject": subject, "fromName": fromName, "fromAddress": "ann@elsewhere.test",
                                              "count": count, "wait": wait])
        return answer["deliveries"] as? [[String: Any]] ?? []
    }

    static func subscriptions(of mail: String) throws -> [[String: Any]] {
        try list("/subscriptions").filter { ($0["mail"] as? String)?.lowercased() == mail.lowercased() }
    }

    static func live(of mail: String) throws -> [[String: Any]] {
        try subscriptions(of: mail).filter { $0["state"] as? String == "live" }
    }

    static func fail(_ operation: String, status: Int, code: String? = nil, retryAfter: Int? = nil, count: Int = 0,
                     onlyFor mail: String? = nil) throws {
        var body: [String: Any] = ["operation": operation, "status": status, "count": count]
        if let mail { body["mail"] = mail }
        if let code { body["code"] = code }
        if let retryAfter { body["retryAfter"] = retryAfter }
        try control("/fail", body)
    }

    /// How many API requests of one operation (get-message, patch, ...) concerned the
    /// user, answered or refused by an injected failure alike.
    static func requests(_ operation: String, of mail: String) throws -> Int {
        let requests = try control("/requests")["requests"] as? [[String: Any]] ?? []
        return requests.filter {
            $0["operation"] as? String == operation && ($0["mail"] as? String)?.lowercased() == mail.lowercased()
        }.count
    }

    static func statuses(_ deliveries: [[String: Any]]) -> [Int] {
        deliveries.compactMap { ($0["status"] as? NSNumber)?.intValue }
    }
}

/// A user of a simulated Graph tenant registered end to end through /registerdevicev2
/// with a delegated token, with one APNs device.
struct GraphMailboxUser {
    let user: TestUser
    let token: String
    let objectID: String

    static func register(with api: DeviceClient, tenant: String = GraphSimulator.contoso, domain: String = "contoso.test",
                         headers: [(String, String)] = [], email chosen: String? = nil) throws -> GraphMailboxUser {
        let email = chosen ?? "g\(UUID().uuidString.prefix(8).lowercased())@\(domain)"
        let objectID = try GraphSimulator.user(email, tenant: tenant)
        let registered = GraphMailboxUser(user: try api.newUser(email: email), token: TestSecrets.apnsToken(), objectID: objectID)
        let answer = try registered.register(with: api, token: registered.token, accessToken: try GraphSimulator.userToken(email), headers: headers)
        try #require(answer.json["responseCode"] == "UserSubscribed", "\(answer.status) \(answer.bodyText)")
        return registered
    }

    func register(with api: DeviceClient, token: String, accessToken: String,
                  force: Bool = false, headers: [(String, String)] = []) throws -> HTTPResponse {
        try api.call("/registerdevicev2", [
            "userid": user.userID, "email": user.email,
            "creds": try user.sealJSON(["apnsToken": token, "graphAccessToken": accessToken]),
            "bundleid": "com.example.mail", "force": force ? "1" : "0",
        ], headers: headers)
    }

    func pushes(to token: String, subject: String? = nil) -> [APNsSimulator.Accepted] {
        APNsSimulator.accepted().filter { push in
            guard push.token == token else { return false }
            guard let subject else { return true }
            return ((push.payload["aps"] as? [String: Any])?["alert"] as? [String: String])?["body"] == subject
        }
    }
}
