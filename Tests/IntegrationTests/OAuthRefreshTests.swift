internal import ENSModel
import Codecs
import Curl
import Foundation
import MariaDB
import OpenSSL
import Testing
@testable import MailBackends
@testable import ENSStore
@testable import ENSVault

/// OAuth refresh (docs/exchange.md, "OAuth refresh"): a device hands over its refresh
/// token, token endpoint and client id with its access token; a callback whose access
/// token has expired renews it at the token endpoint, once per subscription at a time,
/// and keeps the rotated refresh token. Through nginx, the Exchange simulator (which also
/// plays a strict token endpoint: grant types, client ids, rotation with reuse detection,
/// expiry, revocation) and the APNs simulator.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct OAuthRefreshTests {
    let api: DeviceClient
    let database: Connection
    static let endpoint = "https://login.pox.test/common/oauth2/v2.0/token"

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("oauth-refresh-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        try ExchangeSimulator.reset()
    }

    /// A user of `clientID`'s app with a grant: the mailbox, the grant's first tokens
    /// (remembered as secrets the scan must never find) and the device's push token.
    struct OAuthUser {
        let user: TestUser
        let email: String
        let clientID: String
        let accessToken: String
        let refreshToken: String
        let pushToken: String
    }

    func oauthUser(rotate: Bool = true, accessLifetime: Int = 3600) throws -> OAuthUser {
        let email = "r\(UUID().uuidString.prefix(8).lowercased())@pox.test"
        let clientID = "ens-tests-\(UUID().uuidString.prefix(6).lowercased())"
        try ExchangeSimulator.control("/oauth/clients", ["clientId": clientID, "rotate": rotate, "accessLifetime": accessLifetime])
        try ExchangeSimulator.mailbox(email)
        let (accessToken, refreshToken) = try grant(email: email, clientID: clientID)
        return OAuthUser(user: try api.newUser(email: email), email: email, clientID: clientID, accessToken: accessToken,
                         refreshToken: refreshToken, pushToken: TestSecrets.apnsToken())
    }

    func grant(email: String, clientID: String) throws -> (accessToken: String, refreshToken: String) {
        let granted = try ExchangeSimulator.control("/oauth/grants", ["email": email, "clientId": clientID])
        let accessToken = try #require(granted["accessToken"] as? String)
        let refreshToken = try #require(granted["refreshToken"] as? String)
        TestSecrets.remember(accessToken)
        TestSecrets.remember(refreshToken)
        return (accessToken, refreshToken)
    }

    func creds(_ user: OAuthUser, accessToken: String? = nil, refreshToken: String? = nil, endpoint: String = Self.endpoint) -> [String: Any] {
        ["oauthAccessToken": accessToken ?? user.accessToken,
         "oauthRefresh": ["refreshToken": refreshToken ?? user.refreshToken, "tokenEndpoint": endpoint, "clientId": user.clientID]]
    }

    func register(_ user: OAuthUser, creds: [String: Any]) throws -> HTTPResponse {
        var sealed = creds
        sealed["apnsToken"] = user.pushToken
        sealed["deviceSecret"] = TestSecrets.deviceSecret(for: user.pushToken)
        return try api.call("/registerdevicev2", [
            "userid": user.user.userID, "email": user.email, "creds": try user.user.sealJSON(sealed, for: "registerdevicev2.creds"),
            "bundleid": "com.example.mail", "force": "0",
        ])
    }

    func checkIn(_ user: OAuthUser, creds: [String: Any]? = nil) throws -> [String: String] {
        var parameters = [
            "userid": user.user.userID,
            "subscriptionPayload": try user.user.sealJSON(["pushToken": user.pushToken, "ignoreLastMessageDate": 1]),
        ]
        if let creds {
            parameters["creds"] = try user.user.sealForDevice(creds, token: user.pushToken, for: "getsubscriptionstatusv2.creds")
            parameters["email"] = user.user.email
        }
        return try api.call("/getsubscriptionstatusv2", parameters).json
    }

    /// The grant's counters at the token endpoint.
    func grants(_ email: String) throws -> [[String: Any]] {
        try ExchangeSimulator.list("/oauth/grants").filter { ($0["email"] as? String) == email }
    }

    func tokenRequests() throws -> [[String: Any]] {
        try ExchangeSimulator.requests().filter { ($0["operation"] as? String) == "Token" }
    }

    func alertBodies(_ pushToken: String) -> [String] {
        APNsSimulator.accepted().filter { $0.token == pushToken }.compactMap {
            (($0.payload["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
        }
    }

    func delivered(_ pushToken: String, subject: String, within seconds: Double = 20) -> Bool {
        TestStack.eventually(within: seconds) { alertBodies(pushToken).contains(subject) }
    }

    /// Sends a mail and waits until its push (any content) reached the device: the body.
    func mail(_ user: OAuthUser, subject: String) throws -> String? {
        let before = alertBodies(user.pushToken).count
        #expect(try ExchangeSimulator.newMail(user.email, subject: subject, fromName: "Olga").first?["subscriptionStatus"] as? String == "OK")
        _ = TestStack.eventually(within: 20) { alertBodies(user.pushToken).count > before }
        return alertBodies(user.pushToken).dropFirst(before).first
    }

    func refused(_ recordID: Int64) throws -> Bool {
        try database.queryOne("""
            SELECT refused_at IS NOT NULL
            FROM MailCredentials c
            JOIN EnsSubscriptionInfo s ON s.id = c.record_id AND s.generation = c.generation
            WHERE s.id = \(recordID)
            """)?.int(0) == 1
    }

    func recordID(_ user: OAuthUser) throws -> Int64 {
        try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)")?.int(0))
    }

    /// The access token expires mid-life: the next callback's GetItem is refused, the
    /// token is renewed and the lookup retried, so the notification keeps its subject.
    /// The refresh token rotates each time; the second renewal works only because the
    /// rotated one was kept (the endpoint revokes a grant whose spent token comes back).
    /// Once the endpoint has said how long a token lives, a callback past that renews
    /// before its first lookup, without a refused request.
    @Test func anExpiredAccessTokenIsRenewedAndTheRotatedRefreshTokenKept() throws {
        let user = try oauthUser(accessLifetime: 30)
        #expect(try register(user, creds: creds(user)).json["responseCode"] == "UserSubscribed")
        let first = "Before expiry \(UUID().uuidString.prefix(6))"
        #expect(try mail(user, subject: first) == first)
        #expect(try grants(user.email).first?["refreshes"] as? Int == 0)

        try ExchangeSimulator.control("/oauth/expire", ["email": user.email])
        let second = "After expiry \(UUID().uuidString.prefix(6))"
        #expect(try mail(user, subject: second) == second)
        #expect(try grants(user.email).first?["refreshes"] as? Int == 1)

        // The renewed token lives 30 s, inside the 60 s margin: due at once. Expired at
        // the endpoint too, so only a renewal before the lookup avoids a refusal.
        try ExchangeSimulator.control("/oauth/expire", ["email": user.email])
        try ExchangeSimulator.control("/clear-records", [:])
        let third = "Renewed ahead \(UUID().uuidString.prefix(6))"
        #expect(try mail(user, subject: third) == third)
        let grant = try #require(try grants(user.email).first)
        #expect(grant["refreshes"] as? Int == 2 && grant["reuseDetected"] as? Bool == false && grant["revoked"] as? Bool == false, "\(grant)")
        let refusedLookups = try ExchangeSimulator.requests().filter { ($0["operation"] as? String) == "GetItem" && ($0["status"] as? Int) == 401 }
        #expect(refusedLookups.isEmpty, "the due token was renewed before GetItem")
        #expect(try tokenRequests().count == 1)
    }

    /// A provider that does not rotate: the same refresh token serves again and again.
    @Test func aRefreshTokenThatDoesNotRotateServesAgain() throws {
        let user = try oauthUser(rotate: false)
        #expect(try register(user, creds: creds(user)).json["responseCode"] == "UserSubscribed")
        for round in 1...2 {
            try ExchangeSimulator.control("/oauth/expire", ["email": user.email])
            let subject = "No rotation \(round) \(UUID().uuidString.prefix(6))"
            #expect(try mail(user, subject: subject) == subject)
        }
        #expect(try grants(user.email).first?["refreshes"] as? Int == 2)
    }

    /// The user's grant is revoked (password reset, admin action). The renewal is
    /// refused: that notification goes out generic, the refusal is recorded, the next
    /// callback does not ask the endpoint again, and the device's check-in is told to
    /// register again. New credentials through a check-in (a new grant) clear it, and
    /// the next callback takes them: subjects again.
    @Test func aRefusedRenewalGoesGenericAndTheCheckInAsksForNewCredentials() throws {
        let user = try oauthUser()
        #expect(try register(user, creds: creds(user)).json["responseCode"] == "UserSubscribed")
        let record = try recordID(user)
        #expect(try checkIn(user)["responseCode"] == "UserSubscribed")

        try ExchangeSimulator.control("/oauth/revoke", ["email": user.email])
        let lost = "Revoked \(UUID().uuidString.prefix(6))"
        let body = try mail(user, subject: lost)
        #expect(body != nil && body != lost, "a generic alert, not the subject")
        #expect(try refused(record))
        #expect(try grants(user.email).first?["refusals"] as? Int == 1)
        #expect(try checkIn(user)["responseCode"] == "UserRecordPresentNotSubscribed")

        let requestsBefore = try tokenRequests().count
        _ = try mail(user, subject: "Still revoked \(UUID().uuidString.prefix(6))")
        #expect(try tokenRequests().count == requestsBefore, "a refused refresh token is not offered again")

        let (accessToken, refreshToken) = try grant(email: user.email, clientID: user.clientID)
        let answer = try checkIn(user, creds: creds(user, accessToken: accessToken, refreshToken: refreshToken))
        #expect(answer["responseCode"] == "UserSubscribed" && answer["credentials"] == "Stored", "\(answer)")
        #expect(try !refused(record))
        let back = "New grant \(UUID().uuidString.prefix(6))"
        #expect(try mail(user, subject: back) == back)
        #expect(try checkIn(user)["responseCode"] == "UserSubscribed")
    }

    /// Two callbacks of one subscription at once, both with an expired token: one
    /// renews (the endpoint is slow, so they overlap), the other waits for its answer.
    /// The endpoint sees one exchange, and both notifications carry their subjects.
    @Test func oneRenewalPerSubscriptionAtATime() throws {
        let user = try oauthUser()
        #expect(try register(user, creds: creds(user)).json["responseCode"] == "UserSubscribed")
        try ExchangeSimulator.control("/oauth/expire", ["email": user.email])
        try ExchangeSimulator.fail("Token", delayMs: 1500)
        defer { try? ExchangeSimulator.reset() }
        try ExchangeSimulator.control("/clear-records", [:])

        let subjects = (1...2).map { "Concurrent \($0) \(UUID().uuidString.prefix(6))" }
        let prepared = try subjects.map { subject -> (url: String, body: String) in
            let answer = try ExchangeSimulator.control("/newmail", ["email": user.email, "subject": subject, "fromName": "Olga", "deliver": false])
            let notification = try #require((answer["notifications"] as? [[String: Any]])?.first)
            return (try #require(notification["url"] as? String), try #require(notification["body"] as? String))
        }
        let statuses = SynchronizedStatuses()
        DispatchQueue.concurrentPerform(iterations: prepared.count) { index in
            let (url, body) = prepared[index]
            let path = String(url[try! #require(url.range(of: "/ews/")).lowerBound...])
            let answer = try? TestStack.post(path, body: Array(body.utf8), contentType: "text/xml; charset=utf-8")
            statuses.append("\(answer?.status ?? 0) \(answer?.bodyText.contains(">OK<") == true)")
        }
        #expect(statuses.values == ["200 true", "200 true"])
        #expect(try tokenRequests().count == 1)
        for subject in subjects { #expect(delivered(user.pushToken, subject: subject)) }
        #expect(try grants(user.email).first?["reuseDetected"] as? Bool == false)
    }

    final class SynchronizedStatuses: @unchecked Sendable {
        private let lock = NSLock()
        private var list: [String] = []
        func append(_ value: String) { lock.withLock { list.append(value) } }
        var values: [String] { lock.withLock { list } }
    }

    /// A token endpoint that fails (503) or hangs costs that notification its content
    /// only: a generic alert within the callback's budget, nothing recorded against the
    /// grant, and the next callback renews.
    @Test func aFailingOrSlowTokenEndpointCostsOneNotificationItsContent() throws {
        let user = try oauthUser()
        #expect(try register(user, creds: creds(user)).json["responseCode"] == "UserSubscribed")
        let record = try recordID(user)
        defer { try? ExchangeSimulator.reset() }

        try ExchangeSimulator.control("/oauth/expire", ["email": user.email])
        try ExchangeSimulator.fail("Token", status: 503, count: 1)
        let unavailable = "Endpoint down \(UUID().uuidString.prefix(6))"
        let body = try mail(user, subject: unavailable)
        #expect(body != nil && body != unavailable)
        #expect(try !refused(record))
        #expect(try checkIn(user)["responseCode"] == "UserSubscribed")

        // Slower than the callback's lookup budget (exchange.item_timeout_ms, 5 s here).
        try ExchangeSimulator.fail("Token", delayMs: 30_000, count: 1)
        let started = Date()
        let slow = "Endpoint slow \(UUID().uuidString.prefix(6))"
        let slowBody = try mail(user, subject: slow)
        #expect(slowBody != nil && slowBody != slow)
        #expect(Date().timeIntervalSince(started) < 20, "the renewal is bounded by the callback's budget")
        #expect(try !refused(record))

        try ExchangeSimulator.reset()
        let recovered = "Endpoint back \(UUID().uuidString.prefix(6))"
        #expect(try mail(user, subject: recovered) == recovered)
    }

    /// What a registration may hand over: `oauthRefresh` only beside an OAuth access
    /// token, with exactly its documented fields, and an https token endpoint.
    @Test func malformedRefreshDetailsAreRefused() throws {
        let user = try oauthUser()
        let base = creds(user)
        let refresh = try #require(base["oauthRefresh"] as? [String: Any])
        func with(_ change: (inout [String: Any]) -> Void) -> [String: Any] {
            var changed = refresh
            change(&changed)
            return ["oauthAccessToken": user.accessToken, "oauthRefresh": changed]
        }
        let cases: [(String, [String: Any])] = [
            ("plain http", with { $0["tokenEndpoint"] = "http://login.pox.test/token" }),
            ("not a URL", with { $0["tokenEndpoint"] = "login.pox.test/token" }),
            ("no client id", with { $0["clientId"] = nil }),
            ("empty refresh token", with { $0["refreshToken"] = "" }),
            ("an unknown field", with { $0["clientSecret"] = "s" }),
            ("not an object", ["oauthAccessToken": user.accessToken, "oauthRefresh": "rt"]),
            ("beside a password", ["userName": user.email, "password": "p", "oauthRefresh": refresh]),
        ]
        for (name, creds) in cases {
            let answer = try register(user, creds: creds)
            #expect(answer.status == 400, "\(name): \(answer.status) \(answer.bodyText)")
        }
    }

    /// A refresh token whose endpoint sits on a port the outbound policy does not allow
    /// registers (the access token proves the mailbox), but no renewal is ever sent
    /// there: the refusal is recorded as the endpoint's would be.
    @Test func aTokenEndpointThePolicyRefusesIsNeverCalled() throws {
        let user = try oauthUser()
        let elsewhere = "https://login.pox.test:8443/common/oauth2/v2.0/token"
        #expect(try register(user, creds: creds(user, endpoint: elsewhere)).json["responseCode"] == "UserSubscribed")
        try ExchangeSimulator.control("/oauth/expire", ["email": user.email])
        try ExchangeSimulator.control("/clear-records", [:])
        let subject = "Policy \(UUID().uuidString.prefix(6))"
        let body = try mail(user, subject: subject)
        #expect(body != nil && body != subject)
        #expect(try tokenRequests().isEmpty)
        #expect(try refused(try recordID(user)))
    }

    // MARK: The claim, by the database's clock and fenced (what two hosts do at once)

    /// A store on a connection of its own: one responder host.
    func host(timeZone: String? = nil) throws -> MailSubscriptionStore {
        let connection = try TestStack.serviceConnection()
        if let timeZone { try connection.execute("SET time_zone = \(timeZone)") }
        return MailSubscriptionStore(database: connection, vault: Vault(masterKey: try AESGCMKey(bytes: [UInt8](repeating: 7, count: 32))))
    }

    /// A registered OAuth user's live subscription: record and generation.
    func liveSubscription() throws -> (record: Int64, generation: Int64) {
        let user = try oauthUser()
        #expect(try register(user, creds: creds(user)).json["responseCode"] == "UserSubscribed")
        let record = try recordID(user)
        let generation = try #require(try database.queryOne("SELECT generation FROM EnsSubscriptionInfo WHERE id = \(record)")?.int(0))
        return (record, generation)
    }

    func storedSealed(_ record: Int64, _ generation: Int64) throws -> [UInt8] {
        try #require(try database.queryOne("SELECT sealed FROM MailCredentials WHERE record_id = \(record) AND generation = \(generation)")?
            .decode([UInt8].self))
    }

    /// Host B's session clock reads five hours ahead of host A's (what a host whose own
    /// clock is skewed sees when it compares). The claim is judged by the database's
    /// clock alone, so B finds A's claim held and does not claim the refresh too (two
    /// renewals would spend the refresh token twice: the provider revokes the grant).
    @Test func aHostWithASkewedClockDoesNotTakeALiveClaim() throws {
        let (record, generation) = try liveSubscription()
        let hostA = try host()
        let hostB = try host(timeZone: "+05:00")
        guard case .claimed(let fence) = try hostA.claimCredentialRefresh(recordID: record, generation: generation, lifetime: .seconds(30)) else {
            Issue.record("a free claim was not taken")
            return
        }
        #expect(try hostB.claimCredentialRefresh(recordID: record, generation: generation, lifetime: .seconds(30)) == .heldElsewhere)
        #expect(try hostB.credentialRefreshUnderWay(recordID: record, generation: generation))
        let now = try #require(try hostA.credentialRefreshClaim(recordID: record, generation: generation, fence: fence))
        #expect(now.remaining > .seconds(25) && now.remaining <= .seconds(30), "\(now.remaining)")
        try hostA.abandonCredentialRefresh(recordID: record, generation: generation, fence: fence, refusedAt: nil)
        #expect(try !hostB.credentialRefreshUnderWay(recordID: record, generation: generation))
    }

    /// Host A claims, then stalls past its claim's expiry; host B takes the refresh
    /// over. A, waking, finds before sending that its claim is gone (so it never sends
    /// the refresh token B is about to rotate), its late write of renewed credentials
    /// is refused by the fence, and its abandon neither frees B's claim nor records a
    /// refusal. B's write goes through; the fence only ever grows.
    @Test func aStalledClaimantIsFencedOutAfterATakeover() throws {
        let (record, generation) = try liveSubscription()
        let hostA = try host()
        let hostB = try host()
        guard case .claimed(let fenceA) = try hostA.claimCredentialRefresh(recordID: record, generation: generation, lifetime: .seconds(30)) else {
            Issue.record("a free claim was not taken")
            return
        }
        // The stall: A's claim runs out by the database's clock.
        try database.execute("""
            UPDATE MailCredentials SET refresh_claim_until = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND
            WHERE record_id = \(record) AND generation = \(generation)
            """)
        #expect(try hostA.credentialRefreshClaim(recordID: record, generation: generation, fence: fenceA) == nil, "expired: not sent")
        guard case .claimed(let fenceB) = try hostB.claimCredentialRefresh(recordID: record, generation: generation, lifetime: .seconds(30)) else {
            Issue.record("an expired claim was not taken over")
            return
        }
        #expect(fenceB.value > fenceA.value)
        #expect(try hostA.credentialRefreshClaim(recordID: record, generation: generation, fence: fenceA) == nil, "taken over: not sent")

        let before = try storedSealed(record, generation)
        #expect(try !hostA.finishCredentialRefresh(recordID: record, generation: generation, fence: fenceA, sealed: Array("late A".utf8)))
        #expect(try storedSealed(record, generation) == before)
        try hostA.abandonCredentialRefresh(recordID: record, generation: generation, fence: fenceA, refusedAt: .now())
        #expect(try !refused(record))
        #expect(try hostB.credentialRefreshUnderWay(recordID: record, generation: generation))

        #expect(try hostB.credentialRefreshClaim(recordID: record, generation: generation, fence: fenceB) != nil)
        #expect(try hostB.finishCredentialRefresh(recordID: record, generation: generation, fence: fenceB, sealed: Array("B".utf8)))
        #expect(try storedSealed(record, generation) == Array("B".utf8))
        #expect(try !hostA.finishCredentialRefresh(recordID: record, generation: generation, fence: fenceA, sealed: Array("late A".utf8)))
        #expect(try storedSealed(record, generation) == Array("B".utf8))
        guard case .claimed(let fenceC) = try hostA.claimCredentialRefresh(recordID: record, generation: generation, lifetime: .seconds(30)) else {
            Issue.record("a freed claim was not taken")
            return
        }
        #expect(fenceC.value > fenceB.value)
    }

    /// Fresh credentials adopted while a refresh is under way (the device handed over a
    /// new grant): the claimant's answer is for the old grant, and its write is refused
    /// even though its claim had time left.
    @Test func adoptingFreshCredentialsFencesOutTheRefreshUnderWay() throws {
        let (record, generation) = try liveSubscription()
        let hostA = try host()
        guard case .claimed(let fence) = try hostA.claimCredentialRefresh(recordID: record, generation: generation, lifetime: .seconds(30)) else {
            Issue.record("a free claim was not taken")
            return
        }
        try host().adoptFreshCredentials(recordID: record, generation: generation, sealed: Array("fresh".utf8),
                                          fresh: .init(id: 0, box: [], suppliedBy: nil))
        #expect(try hostA.credentialRefreshClaim(recordID: record, generation: generation, fence: fence) == nil)
        #expect(try !hostA.finishCredentialRefresh(recordID: record, generation: generation, fence: fence, sealed: Array("stale".utf8)))
        #expect(try storedSealed(record, generation) == Array("fresh".utf8))
    }
}
