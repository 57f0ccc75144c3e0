import Curl
import Foundation
import Testing
import MariaDB

extension TestUser {
    /// Makes this user look subscribed at the Exchange simulator's mail.example.test, as
    /// a finished registration leaves the record (last heard from `callbackAge` seconds
    /// ago), and gives the simulator a mailbox for the address that these credentials
    /// open. A device that joins then proves itself for real (docs/security.md, "Proof
    /// of possession"); tests that need the whole Exchange path use ExchangeTests'.
    func pretendSubscribed(database: Connection, password: String? = nil, oauthToken: String? = nil, callbackAge: Int = 0) throws {
        if let password { TestSecrets.remember(password) }
        if let oauthToken { TestSecrets.remember(oauthToken) }
        try ExchangeSimulator.mailbox(email, userName: password == nil ? nil : email, password: password, oauthToken: oauthToken)
        // A joining device finds its own Exchange by Autodiscover, as a real one would:
        // it proves itself only where its own address leads (docs/security.md).
        try ExchangeSimulator.domain("example.test", mode: "pox-root")
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET registered = 1, subscription_id = 'sub-test',
              backend_url = 'https://mail.example.test/EWS/Exchange.asmx', endpoint = 'https://mail.example.test:443',
              backend_version = 'Exchange2010_SP2',
              last_callback_at = NOW(3) - INTERVAL \(callbackAge) SECOND, heartbeat_minutes = 30
            WHERE userid = \(userID)
            """)
        try TestStack.rebind(userID: userID, database: database)
    }
}

/// A user registered end to end through /registerdevicev2 against the Exchange
/// simulator's pox.test (Autodiscover, proof, Subscribe), with one device.
struct RegisteredUser {
    let user: TestUser
    let password: String
    let token: String

    /// `email`: an address of pox.test chosen by the caller (one in a given bucket, say).
    static func register(with api: DeviceClient, email chosen: String? = nil) throws -> RegisteredUser {
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        let email = chosen ?? "v\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let password = "Pa55-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(password)
        try ExchangeSimulator.mailbox(email, userName: email, password: password)
        let registered = RegisteredUser(user: try api.newUser(email: email), password: password, token: TestSecrets.apnsToken())
        let answer = try registered.register(with: api, token: registered.token)
        try #require(answer.json["responseCode"] == "UserSubscribed", "\(answer.status) \(answer.bodyText)")
        return registered
    }

    /// Basic-auth `creds` for this user's mailbox (or other credentials).
    func creds(token: String, userName: String? = nil, password: String? = nil, ewsURL: String? = nil) -> [String: Any] {
        var creds: [String: Any] = ["apnsToken": token, "userName": userName ?? user.email, "password": password ?? self.password]
        if let ewsURL { creds["ewsUrl"] = ewsURL }
        return creds
    }

    /// `extra`: more parameters (a privacy mode, say). The creds are bound, as a client
    /// of today seals them (`sealedFor`: another purpose, or nil for the contract's
    /// unbound form). `withSecret: false` registers as the original contract's clients
    /// do, without a device secret.
    func register(with api: DeviceClient, token: String, creds: [String: Any]? = nil, force: Bool = false,
                  headers: [(String, String)] = [], extra: [String: String] = [:],
                  sealedFor purpose: String? = "registerdevicev2.creds", withSecret: Bool = true) throws -> HTTPResponse {
        var creds = creds ?? self.creds(token: token)
        if withSecret, creds["deviceSecret"] == nil, let pushToken = (creds["apnsToken"] as? String)
            ?? (creds["fcmToken"] as? String).map({ "fcm:" + $0 }) {
            creds["deviceSecret"] = TestSecrets.deviceSecret(for: pushToken)
        }
        return try api.call("/registerdevicev2", [
            "userid": user.userID, "email": user.email, "creds": try purpose.map { try user.sealJSON(creds, for: $0) } ?? user.sealJSON(creds),
            "bundleid": "com.example.mail", "exchVersion": "3", "force": force ? "1" : "0",
        ].merging(extra) { _, new in new }, headers: headers)
    }

    /// New mail for this user; true once a push with `subject` reached `token` and its
    /// NotificationLog row is written (a row without content is the sender's to write,
    /// in its next batch: it may land just after the push).
    func mailReaches(_ token: String, subject: String, within seconds: Double = 20) throws -> Bool {
        _ = try ExchangeSimulator.newMail(user.email, subject: subject, fromName: "Ann Example")
        guard TestStack.eventually(within: seconds, { !pushes(to: token, subject: subject).isEmpty }) else { return false }
        return try TestStack.logRowsWritten(for: pushes(to: token, subject: subject))
    }

    func pushes(to token: String, subject: String) -> [APNsSimulator.Accepted] {
        APNsSimulator.accepted().filter { push in
            push.token == token && ((push.payload["aps"] as? [String: Any])?["alert"] as? [String: String])?["body"] == subject
        }
    }
}
