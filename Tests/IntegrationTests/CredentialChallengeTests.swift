import Curl
import ENSStore
import Foundation
import MariaDB
import Testing

/// Credentials go only where a challenge asks for them, and ENS cannot be used to lock
/// a directory account (docs/security.md, "Credentials go only where a challenge
/// asks"). Against the Exchange simulator, which answers an uncredentialed request with
/// 401 and `WWW-Authenticate: Basic realm="sim", Bearer`, and records each request's
/// host, operation, the kind of credentials it carried and its status.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct CredentialChallengeTests {
    let api: DeviceClient

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("credential-challenge-tests"))
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
    }

    func requests(since start: Double) throws -> [[String: Any]] {
        try ExchangeSimulator.requests().filter { (($0["time"] as? NSNumber)?.doubleValue ?? 0) >= start }
    }

    /// A registration asks every server without the password first, and sends it only
    /// in answer to that server's challenge, to the same URL.
    @Test func thePasswordFollowsAChallengeAtEachServer() throws {
        let start = Date().timeIntervalSince1970 * 1000 - 1
        let user = try RegisteredUser.register(with: api)
        let seen = try requests(since: start).filter { ($0["host"] as? String)?.hasSuffix("pox.test") == true }
        let credentialed = seen.enumerated().filter { ($0.element["auth"] as? String) == "basic" }
        #expect(!credentialed.isEmpty)
        for (index, request) in credentialed {
            let operation = request["operation"] as? String
            // Autodiscover and the proof (GetFolder) come after a challenge; later calls at
            // the proven server (Subscribe) need none.
            guard operation?.hasPrefix("Autodiscover") == true || operation == "GetFolder" else { continue }
            let challenged = seen[..<index].contains { earlier in
                earlier["path"] as? String == request["path"] as? String && earlier["host"] as? String == request["host"] as? String
                    && (earlier["auth"] as? String ?? "none") == "none" && (earlier["status"] as? NSNumber)?.intValue == 401
            }
            #expect(challenged, "\(operation ?? "?") at \(request["host"] ?? "?") got the password unasked")
        }
        #expect(try ExchangeSimulator.violations().isEmpty, "\(user.user.userID)")
    }

    /// Twenty records, each registered with the same account name and a wrong password
    /// (someone with the app's ApiToken trying to lock that account): at most
    /// `ProofThrottle.identityFailureLimit` failed logins reach the server in the
    /// window, and the rest are answered 429 without contacting it.
    @Test func oneAccountCostsAtMostFiveFailedLoginsWhateverTheRecords() throws {
        let account = "a\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let password = "Right-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(password)
        try ExchangeSimulator.mailbox(account, userName: account, password: password)
        let start = Date().timeIntervalSince1970 * 1000 - 1
        var answers: [String] = []
        for attempt in 0..<20 {
            let email = "r\(attempt)-\(UUID().uuidString.prefix(6).lowercased())@pox.test"
            try ExchangeSimulator.mailbox(email, userName: email, password: "unused-\(attempt)")
            let user = try api.newUser(email: email)
            TestSecrets.remember("wrong-\(attempt)")
            let answer = try api.call("/registerdevicev2", [
                "userid": user.userID, "email": user.email, "bundleid": "com.example.mail",
                "creds": try user.sealJSON(["apnsToken": TestSecrets.apnsToken(), "userName": account, "password": "wrong-\(attempt)"],
                                           for: "registerdevicev2.creds"),
            ])
            answers.append(answer.status == 429 ? "429" : answer.json["responseCode"] ?? "\(answer.status)")
        }
        let failedLogins = try requests(since: start).filter { ($0["auth"] as? String) == "basic" && ($0["status"] as? NSNumber)?.intValue == 401 }
        #expect(failedLogins.count <= ProofThrottle.identityFailureLimit, "\(failedLogins.count) failed logins: \(answers)")
        #expect(answers.filter { $0 == "429" }.count >= 20 - ProofThrottle.identityFailureLimit, "\(answers)")
    }
}
