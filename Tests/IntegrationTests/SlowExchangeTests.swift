import Curl
import Foundation
import MariaDB
import Testing

/// An Exchange that accepts and never answers (the simulator's "tarpit" domain) against
/// the responder pool: registrations aimed at it end within their budget or are turned
/// away at once, and the device API and the Exchange callbacks of everyone else keep
/// answering in their normal time. The test stack's budget is 4 s (scripts/test.sh).
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct SlowExchangeTests {
    let api: DeviceClient

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("slow-exchange-tests"))
        try ExchangeSimulator.reset()
        try ExchangeSimulator.domain("tarpit.test", mode: "tarpit")
    }

    @Test func eightRegistrationsAgainstATarpitLeaveEveryoneElseServed() throws {
        let bystander = try RegisteredUser.register(with: api)
        let users = try (0..<8).map { index in try api.newUser(email: "tarpit\(index)-\(UUID().uuidString.prefix(6).lowercased())@tarpit.test") }
        let sealed = try users.map { user in
            try user.sealJSON(["apnsToken": TestSecrets.apnsToken(), "userName": user.email, "password": "tarpit-pw",
                               "ewsUrl": "https://mail.tarpit.test/EWS/Exchange.asmx"])
        }
        TestSecrets.remember("tarpit-pw")
        let apiToken = api.token
        let answers = SynchronizedValues<String>()
        let group = DispatchGroup()
        for (user, creds) in zip(users, sealed) {
            // A thread each, so the eight are really at once: GCD's pool on a 2-core host
            // runs blocking work a few at a time, and then no place would ever be short.
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                let begin = Date()
                let response = try? DeviceClient(token: apiToken).call("/registerdevicev2", [
                    "userid": user.userID, "email": user.email, "creds": creds, "bundleid": "com.example.mail",
                ])
                answers.append("\(response?.status ?? 0) \(response?.json["responseCode"] ?? "-") \(Int(Date().timeIntervalSince(begin) * 1000))")
            }
        }
        // While they are stuck: /alive and another user's new mail are served. (No
        // stopwatch here: on a loaded host a timed bound fails for reasons of its own;
        // what matters is that neither waits for the registrations.)
        Thread.sleep(forTimeInterval: 0.5)
        for _ in 0..<5 { #expect(try TestStack.get("/alive").status == 200) }
        #expect(try bystander.mailReaches(bystander.token, subject: "Through a slow neighbour", within: 20))
        group.wait()
        // Each ended within the budget (4 s, with room for the last request's own
        // timeout and the test host): ExchangeError when its place timed out, 503 when
        // no place was free.
        let outcomes = answers.values
        #expect(outcomes.count == 8)
        for outcome in outcomes {
            let parts = outcome.split(separator: " ")
            #expect(["200 ExchangeError", "503 ServiceUnavailable"].contains("\(parts[0]) \(parts[1])"), "\(outcome)")
            #expect((Int(parts[2]) ?? .max) < 9000, "\(outcome)")
        }
        #expect(outcomes.contains { $0.hasPrefix("503") })
    }
}
