import Curl
import Foundation
import MariaDB
import Testing

/// /registerdevicev2 as an attacker holding the app's ApiToken (it ships in every
/// install) and a victim's address would use it, and as a user whose re-registration
/// fails would meet it: nothing joins a mailbox or replaces its subscription without
/// credentials that open that mailbox at its own Exchange, and a failed attempt
/// changes nothing the user can notice. Through nginx, against the Exchange simulator
/// (whose "hostile" domains play an attacker's own EWS).
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct RegistrationTrustTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("trust-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.reset()
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
    }

    func subscribedVictim() throws -> RegisteredUser { try RegisteredUser.register(with: api) }

    /// The answer to a registration for `victim`'s record with `creds`.
    func register(_ victim: RegisteredUser, creds: [String: Any],
                  force: Bool = false) throws -> (status: Int, json: [String: String], retryAfter: String?) {
        let response = try victim.register(with: api, token: "", creds: creds, force: force)
        return (response.status, response.json, response.header("Retry-After"))
    }

    /// generation, registered, subscription id, EWS URL.
    func subscriptionColumns(_ user: TestUser) throws -> [String?] {
        let row = try #require(try database.queryOne("""
            SELECT generation, registered, subscription_id, backend_url FROM EnsSubscriptionInfo WHERE userid = \(user.userID)
            """))
        return [String(try row.int(0)), String(try row.int(1)), try row.optionalText(2), try row.optionalText(3)]
    }

    func deviceCount(_ user: TestUser) throws -> Int64 {
        try database.queryOne("""
            SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(user.userID)
            """)?.int(0) ?? -1
    }

    /// New mail for the victim still reaches the victim's device.
    func expectMailStillDelivered(_ victim: RegisteredUser, subject: String) throws {
        #expect(try victim.mailReaches(victim.token, subject: subject))
    }

    func operations(to host: String) throws -> [String] {
        try ExchangeSimulator.requests().filter { ($0["host"] as? String) == host }.compactMap { $0["operation"] as? String }
    }

    // MARK: A failed re-registration changes nothing

    @Test func forcedReRegistrationWithAWrongPasswordKeepsTheSubscriptionDelivering() throws {
        let victim = try subscribedVictim()
        let before = try subscriptionColumns(victim.user)
        let answer = try register(victim, creds: victim.creds(token: victim.token, password: "wrong-password"), force: true)
        #expect(answer.json["responseCode"] == "ExchangeAuthFailed")
        #expect(try subscriptionColumns(victim.user) == before)
        // Exchange keeps pushing to the old URL, and it is still the live one.
        try expectMailStillDelivered(victim, subject: "After a wrong password")
    }

    @Test func exchangeFailingDuringAForcedReRegistrationKeepsTheSubscriptionDelivering() throws {
        let victim = try subscribedVictim()
        let before = try subscriptionColumns(victim.user)
        try ExchangeSimulator.fail("Subscribe", status: 500, count: 1)
        let answer = try register(victim, creds: victim.creds(token: victim.token), force: true)
        #expect(answer.json["responseCode"] == "ExchangeError")
        #expect(try subscriptionColumns(victim.user) == before)
        try expectMailStillDelivered(victim, subject: "After an Exchange outage")
    }

    @Test func aSuccessfulForcedReRegistrationRetiresTheOldSubscription() throws {
        let victim = try subscribedVictim()
        let before = try subscriptionColumns(victim.user)
        #expect(try register(victim, creds: victim.creds(token: victim.token), force: true).json["responseCode"] == "UserSubscribed")
        let after = try subscriptionColumns(victim.user)
        #expect(after[0] != before[0] && after[2] != before[2])
        let outcomes = try ExchangeSimulator.heartbeat(victim.user.email).compactMap { $0["subscriptionStatus"] as? String }
        #expect(outcomes.sorted() == ["OK", "Unsubscribe"])
    }

    // MARK: Joining a subscribed record needs proof

    @Test func aDeviceCannotJoinASubscribedRecordWithoutTheMailboxPassword() throws {
        let victim = try subscribedVictim()
        let attackerToken = TestSecrets.apnsToken()
        let answer = try register(victim, creds: victim.creds(token: attackerToken, password: "guessed"))
        #expect(answer.json["responseCode"] == "ExchangeAuthFailed")
        #expect(try deviceCount(victim.user) == 1)
        try expectMailStillDelivered(victim, subject: "Not for the attacker")
        #expect(!APNsSimulator.accepted().contains { $0.token == attackerToken })
    }

    @Test func anotherAccountsValidCredentialsDoNotOpenTheVictimsMailbox() throws {
        // The attacker has a real mailbox on the same Exchange (a colleague, say).
        let victim = try subscribedVictim()
        let attacker = "a\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        try ExchangeSimulator.mailbox(attacker, userName: attacker, password: "attacker-pw-1")
        TestSecrets.remember("attacker-pw-1")
        let joined = try register(victim, creds: victim.creds(token: TestSecrets.apnsToken(), userName: attacker, password: "attacker-pw-1"))
        #expect(joined.json["responseCode"] == "ExchangeAuthFailed")
        #expect(try deviceCount(victim.user) == 1)
        // Nor can they re-subscribe the victim's record to their own mailbox.
        let before = try subscriptionColumns(victim.user)
        let forced = try register(victim, creds: victim.creds(token: TestSecrets.apnsToken(), userName: attacker, password: "attacker-pw-1"),
                                  force: true)
        #expect(forced.json["responseCode"] == "ExchangeAuthFailed")
        #expect(try subscriptionColumns(victim.user) == before)
        #expect(try ExchangeSimulator.subscriptions(of: attacker).isEmpty)
    }

    @Test func theOwnersSecondDeviceJoinsWithProof() throws {
        let victim = try subscribedVictim()
        let subscriptionsBefore = try ExchangeSimulator.subscriptions(of: victim.user.email).count
        let second = TestSecrets.apnsToken()
        #expect(try register(victim, creds: victim.creds(token: second)).json["responseCode"] == "UserUpdated")
        #expect(try deviceCount(victim.user) == 2)
        #expect(try ExchangeSimulator.subscriptions(of: victim.user.email).count == subscriptionsBefore)
        let proofs = try ExchangeSimulator.requests().filter { ($0["operation"] as? String) == "GetFolder" && ($0["status"] as? Int) == 200 }
        #expect(!proofs.isEmpty)
    }

    // MARK: An attacker's own EWS

    @Test func aForcedRegistrationCannotPointTheRecordAtAnAttackersEWS() throws {
        let victim = try subscribedVictim()
        try ExchangeSimulator.domain("evil.test", mode: "hostile")
        let before = try subscriptionColumns(victim.user)
        // The simulator's request log spans the run: other suites' squatters subscribe there.
        let subscribesBefore = try operations(to: "mail.evil.test").filter { $0 == "Subscribe" }.count
        let answer = try register(victim,
                                  creds: victim.creds(token: TestSecrets.apnsToken(), userName: "junk", password: "junk",
                                                      ewsURL: "https://mail.evil.test/EWS/Exchange.asmx"), force: true)
        #expect(answer.json["responseCode"] == "ExchangeAuthFailed")
        #expect(answer.json["message"]?.contains("ewsUrl") == true)
        #expect(try subscriptionColumns(victim.user) == before)
        #expect(try operations(to: "mail.evil.test").filter { $0 == "Subscribe" }.count == subscribesBefore)
        try expectMailStillDelivered(victim, subject: "Still from the real Exchange")
    }

    @Test func theMailboxsOwnExchangeMayBeNamedExplicitly() throws {
        let victim = try subscribedVictim()
        let answer = try register(victim, creds: victim.creds(token: victim.token, ewsURL: "https://mail.pox.test/EWS/Exchange.asmx"), force: true)
        #expect(answer.json["responseCode"] == "UserSubscribed")
    }

    // MARK: Concurrency and throttling

    @Test func concurrentForcedRegistrationsEndWithExactlyOneLiveSubscription() throws {
        let victim = try subscribedVictim()
        let user = victim.user
        var creds = victim.creds(token: victim.token).compactMapValues { $0 as? String }
        creds["deviceSecret"] = TestSecrets.deviceSecret(for: victim.token)
        let fixedCreds = creds
        let apiToken = api.token
        let results = SynchronizedValues<String>()
        // Every attempt its own sealedAt, as a client's: a bound value is spent by its
        // use, record and time, whichever thread sealed it.
        let start = Int64(Date().timeIntervalSince1970 * 1000)
        let attempts = SynchronizedValues<Int64>()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let client = try? DeviceClient(token: apiToken)
            // A 503 (this responder's registration places all taken) is tried again, as a
            // client would: sealed anew, since a bound value is spent once opened.
            for _ in 0..<100 {
                let sealedAt = start - Int64(attempts.appendCounting(0))
                guard let sealed = try? user.sealJSON(fixedCreds, for: "registerdevicev2.creds", sealedAt: sealedAt) else { break }
                let answer = try? client?.call("/registerdevicev2", [
                    "userid": user.userID, "email": user.email, "bundleid": "com.example.mail", "force": "1", "creds": sealed,
                ])
                if answer?.status == 503 {
                    Thread.sleep(forTimeInterval: 0.05)
                    continue
                }
                results.append(answer?.json["responseCode"] ?? "none")
                return
            }
            results.append("still 503")
        }
        #expect(results.values == Array(repeating: "UserSubscribed", count: 4))
        // Five subscriptions exist at the simulator; exactly one is live, and it is the
        // one the record names.
        let outcomes = try ExchangeSimulator.heartbeat(victim.user.email).compactMap { $0["subscriptionStatus"] as? String }
        #expect(outcomes.count == 5)
        #expect(outcomes.filter { $0 == "OK" }.count == 1)
        let live = try #require(try subscriptionColumns(victim.user)[2])
        let okSubscription = try ExchangeSimulator.subscriptions(of: victim.user.email).filter { ($0["id"] as? String) == live }
        #expect(okSubscription.count == 1)
    }

    /// Requests the simulator refused for wrong credentials so far (401): each one a
    /// wrong password the mailbox's directory counts towards locking the account.
    /// Credentials Exchange refused (a 401 to a request that carried some; the 401
    /// that challenges an uncredentialed first request is no refusal).
    func refusedCredentials() throws -> Int {
        try ExchangeSimulator.requests().filter { ($0["status"] as? Int) == 401 && ($0["auth"] as? String ?? "none") != "none" }.count
    }

    /// An attacker with the app's ApiToken hammers a subscribed user's record with
    /// wrong passwords, first from one device, then inventing a new device token for
    /// every try, all from one address (127.0.0.1). They get 429 at their device and
    /// at their address without Exchange being asked, so the wrong passwords that reach
    /// the mailbox stay bounded; the owner still joins a new device from another
    /// network (127.0.0.2, through the same nginx) and re-registers their own device
    /// from the attacker's address.
    @Test func badProofsAreHeldAtTheAttackersDeviceAndAddressWhileTheOwnerStillRegisters() throws {
        let victim = try subscribedVictim()
        // Another account name than the owner's: guesses at the owner's own account hold
        // that account's registrations everywhere (CredentialChallengeTests); this shows
        // the per-device and per-address holds, which leave the owner free.
        let guessed = "guess-\(UUID().uuidString.prefix(6).lowercased())@pox.test"
        let refusedBefore = try refusedCredentials()
        let attackerDevice = TestSecrets.apnsToken()
        for attempt in 0..<5 {
            let answer = try register(victim, creds: victim.creds(token: attackerDevice, userName: guessed, password: "guess-\(attempt)"))
            #expect(answer.json["responseCode"] == "ExchangeAuthFailed")
        }
        let reachedExchange = try refusedCredentials() - refusedBefore
        #expect(reachedExchange >= 5)
        let asked = try ExchangeSimulator.requests().count
        let throttled = try register(victim, creds: victim.creds(token: attackerDevice, userName: guessed, password: "guess-5"))
        #expect(throttled.status == 429)
        #expect(throttled.json["responseCode"] == "TooManyRequests")
        #expect(throttled.retryAfter != nil)
        // A new device token per try changes nothing: the address has had its five.
        for attempt in 0..<5 {
            let answer = try register(victim,
                                      creds: victim.creds(token: TestSecrets.apnsToken(), userName: guessed, password: "fresh-device-\(attempt)"))
            #expect(answer.status == 429)
        }
        #expect(try ExchangeSimulator.requests().count == asked)
        #expect(try refusedCredentials() - refusedBefore == reachedExchange)

        // The owner's new phone on another network joins, proving itself at Exchange.
        let ownerElsewhere = try DeviceClient(token: api.token, from: "127.0.0.2")
        let ownerPhone = TestSecrets.apnsToken()
        let joined = try victim.register(with: ownerElsewhere, token: ownerPhone)
        #expect(joined.json["responseCode"] == "UserUpdated", "\(joined.status) \(joined.bodyText)")
        #expect(try deviceCount(victim.user) == 2)
        // The owner's registered device re-registers even from the attacker's address.
        let again = try register(victim, creds: victim.creds(token: victim.token))
        #expect(again.json["responseCode"] == "UserAlreadySubscribed", "\(again.status)")
        // The attacker's device stays held, from any address.
        let moved = try victim.register(with: ownerElsewhere, token: attackerDevice,
                                        creds: victim.creds(token: attackerDevice, userName: guessed, password: "guess-6"))
        #expect(moved.status == 429)
        #expect(try refusedCredentials() - refusedBefore == reachedExchange)
        try expectMailStillDelivered(victim, subject: "Still the owner's")
        // Another record is not affected.
        _ = try subscribedVictim()
    }

    // MARK: Callbacks while a registration is in flight

    @Test func aCallbackForARegistrationNotYetRecordedIsRetriedNotLost() throws {
        let victim = try subscribedVictim()
        // The state between Subscribe and its commit: the simulator's subscription
        // carries a generation the record has handed out but not yet made live.
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET pending_generation = generation, generation = generation - 1,
                pending_started_at = NOW(3) WHERE userid = \(victim.user.userID)
            """)
        let pending = try ExchangeSimulator.heartbeat(victim.user.email)
        #expect(pending.first?["httpStatus"] as? Int == 503, "\(pending)")
        // An attempt that never committed (its responder died) is not kept alive forever.
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET pending_started_at = NOW(3) - INTERVAL 1 HOUR WHERE userid = \(victim.user.userID)
            """)
        // (The simulator's retry of the refused heartbeat may be the one that hears it.)
        #expect(try TestStack.eventually(within: 10) {
            let answer = try ExchangeSimulator.heartbeat(victim.user.email).first
            return answer?["subscriptionStatus"] as? String == "Unsubscribe" || (answer?["error"] as? String)?.contains("unsubscribed") == true
        })
    }

    // MARK: Connections and headers

    /// A connection that presented one user's client certificate carries nothing else:
    /// not another certificate user's requests, not a password user's. (Basic and
    /// Bearer requests authenticate themselves one by one and may share.)
    @Test func aClientCertificateConnectionServesThatCertificateOnly() throws {
        func certificateUser() throws -> (TestUser, [String: Any]) {
            let email = "c\(UUID().uuidString.prefix(8).lowercased())@pox.test"
            let (pkcs12, password) = try ExchangeSimulator.certificateMailbox(email)
            return (try api.newUser(email: email), ["CBAData": ["certificate": pkcs12, "password": password] as [String: Any]])
        }
        let (firstUser, firstCreds) = try certificateUser()
        let (secondUser, secondCreds) = try certificateUser()
        let basic = try subscribedVictim()
        let register = { (user: TestUser, creds: [String: Any]) throws -> String? in
            var all = creds
            all["apnsToken"] = TestSecrets.apnsToken()
            return try api.call("/registerdevicev2", [
                "userid": user.userID, "email": user.email, "creds": try user.sealJSON(all), "bundleid": "com.example.mail", "exchVersion": "3",
            ]).json["responseCode"]
        }
        #expect(try register(firstUser, firstCreds) == "UserSubscribed")
        #expect(try register(secondUser, secondCreds) == "UserSubscribed")
        for _ in 0..<3 {
            #expect(try register(firstUser, firstCreds) == "UserUpdated")
            #expect(try register(basic.user, ["userName": basic.user.email, "password": basic.password]) == "UserUpdated")
            #expect(try register(secondUser, secondCreds) == "UserUpdated")
        }
        // The simulator records the connection and the mailbox of every request.
        let certificateMailboxes: Set = [firstUser.email.lowercased(), secondUser.email.lowercased()]
        let everyone = certificateMailboxes.union([basic.user.email.lowercased()])
        var mailboxesByConnection: [String: Set<String>] = [:]
        for request in try ExchangeSimulator.requests() {
            guard let mailbox = request["mailbox"] as? String, everyone.contains(mailbox),
                  let connection = request["connection"] as? String else { continue }
            mailboxesByConnection[connection, default: []].insert(mailbox)
        }
        #expect(Set(mailboxesByConnection.values.flatMap { $0 }) == everyone)
        for (connection, mailboxes) in mailboxesByConnection where !mailboxes.isDisjoint(with: certificateMailboxes) {
            #expect(mailboxes.count == 1, "\(connection) served \(mailboxes)")
        }
    }

    /// An OAuth token with CR/LF in it would have added headers of its own to a request
    /// on a connection other users' requests share. It is refused before anything is sent.
    @Test func aTokenWithLineBreaksCannotInjectHeaders() throws {
        let victim = try subscribedVictim()
        let before = try ExchangeSimulator.requests().count
        var creds: [String: Any] = ["apnsToken": TestSecrets.apnsToken(), "oauthAccessToken": "token\r\nX-Injected: 1"]
        creds["ewsUrl"] = "https://mail.pox.test/EWS/Exchange.asmx"
        let answer = try register(victim, creds: creds, force: true)
        #expect(answer.json["responseCode"] == "ExchangeError")
        #expect(try ExchangeSimulator.requests().count == before)
    }
}
