internal import ENSModel
import Codecs
import Curl
@testable import ENSStore
import ENSVault
import Foundation
import MariaDB
import OpenSSL
import POSIX
import Testing

/// Exchange Online mailboxes through Microsoft Graph, end to end through nginx: a
/// delegated token proves the mailbox once, ENS subscribes with its own application
/// (certificate client assertion), the Graph simulator validates both notification
/// URLs and posts change notifications and lifecycle events, ENS hands each new message
/// to ens-sender before answering 202. Includes the mistakes other projects made
/// (research/graph.md §6): validation answered as JSON or 201, 403 on a bad clientState,
/// lifecycle events without `resource` refused, notifications lost on a crash.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct GraphTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("graph-tests"))
        database = try TestStack.serviceConnection()
        try GraphSimulator.reset()
    }

    func cron(_ arguments: [String]) throws -> String {
        try TestStack.run(TestStack.root + "/.build/debug/ens-cron", arguments + ["--config", TestStack.directory + "/ens.conf"])
    }

    func recordColumns(_ user: GraphMailboxUser) throws -> (backend: String, subscription: String?, tenant: String?,
                                                            path: String?, renewAfterHours: Double?) {
        let row = try #require(try database.queryOne("""
            SELECT mail_backend, subscription_id, backend_tenant, backend_url,
                   TIMESTAMPDIFF(SECOND, NOW(3), renew_after) / 3600 FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)
            """))
        let (backend, subscription, tenant, path, hours) = try row.decode(String.self, String?.self, String?.self, String?.self, String?.self)
        return (backend, subscription, tenant, path, hours.flatMap(Double.init))
    }

    /// POSTs a body to one of the user's live subscriptions' notification URL, as Graph
    /// would (or as someone who learned the URL would); returns ENS's answer.
    func postRaw(_ user: GraphMailboxUser, _ body: Any, lifecycle: Bool = false) throws -> (status: Int, contentType: String, body: String) {
        let subscription = try #require(try GraphSimulator.live(of: user.user.email).first?["id"] as? String)
        let answer = try GraphSimulator.control("/post-raw", ["subscriptionId": subscription, "body": body, "lifecycle": lifecycle, "wait": true])
        return ((answer["status"] as? NSNumber)?.intValue ?? 0, answer["contentType"] as? String ?? "", "\(answer["body"] ?? "")")
    }

    func subscriptionID(_ user: GraphMailboxUser) throws -> String {
        try #require(try GraphSimulator.live(of: user.user.email).first?["id"] as? String)
    }

    // MARK: Registration and delivery

    @Test func aGraphMailboxRegistersAndReceivesNewMailWithSenderAndSubject() throws {
        let user = try GraphMailboxUser.register(with: api)
        let subscriptions = try GraphSimulator.live(of: user.user.email)
        try #require(subscriptions.count == 1)
        let subscription = subscriptions[0]
        #expect(subscription["creatorKind"] as? String == "app", "subscribed with ENS's application token, not the user's")
        #expect(subscription["immutableIds"] as? Bool == true)
        #expect(subscription["hasLifecycleUrl"] as? Bool == true)
        #expect(subscription["changeType"] as? String == "created")
        #expect((subscription["clientStateLength"] as? NSNumber)?.intValue ?? 0 > 0
            && (subscription["clientStateLength"] as? NSNumber)?.intValue ?? 999 <= 128)
        let columns = try recordColumns(user)
        #expect(columns.backend == "graph" && columns.tenant == GraphSimulator.contoso && columns.path == "users/\(user.objectID)")
        // Renewal comes at about half of the 4,200-minute lifetime (35 h).
        #expect(columns.renewAfterHours.map { $0 > 34 && $0 < 36 } == true, "\(String(describing: columns.renewAfterHours))")

        let deliveries = try GraphSimulator.newMail(user.user.email, subject: "Graph lunch", fromName: "Ann Example")
        #expect(GraphSimulator.statuses(deliveries) == [202], "\(deliveries)")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "Graph lunch").isEmpty })
        let push = try #require(user.pushes(to: user.token, subject: "Graph lunch").first)
        #expect(((push.payload["aps"] as? [String: Any])?["alert"] as? [String: String])?["title"] == "Ann Example")
        // ENS asked for sender and subject only, and no unread count for a device without a badge.
        let stats = try GraphSimulator.stats()
        #expect(((stats["message_gets"] as? [String: Any])?[user.user.email] as? NSNumber)?.intValue == 1)
        #expect(((stats["folder_gets"] as? [String: Any])?[user.user.email] as? NSNumber)?.intValue ?? 0 == 0)
        let violations = try GraphSimulator.violations()
        #expect(violations.isEmpty, "\(violations)")
    }

    @Test func theBadgeCountIsAskedOnlyWhenADeviceWantsIt() throws {
        let user = try GraphMailboxUser.register(with: api, headers: [("badge", "1")])
        _ = try GraphSimulator.newMail(user.user.email, subject: "Badge mail")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "Badge mail").isEmpty })
        let push = try #require(user.pushes(to: user.token, subject: "Badge mail").first)
        #expect((push.payload["aps"] as? [String: Any])?["badge"] != nil)
        let folderGets = ((try GraphSimulator.stats()["folder_gets"] as? [String: Any])?[user.user.email] as? NSNumber)?.intValue ?? 0
        #expect(folderGets == 1)
    }

    @Test func aSecondDeviceJoinsWithItsOwnTokenAndAStrangersTokenIsRefused() throws {
        let user = try GraphMailboxUser.register(with: api)
        let second = TestSecrets.apnsToken()
        let joined = try user.register(with: api, token: second, accessToken: try GraphSimulator.userToken(user.user.email))
        #expect(joined.json["responseCode"] == "UserUpdated", "\(joined.bodyText)")
        #expect(try GraphSimulator.subscriptions(of: user.user.email).count == 1, "joining creates no second subscription")
        // Someone else's valid token does not open this mailbox.
        let stranger = "s\(UUID().uuidString.prefix(8).lowercased())@contoso.test"
        try GraphSimulator.user(stranger)
        let refused = try user.register(with: api, token: TestSecrets.apnsToken(), accessToken: try GraphSimulator.userToken(stranger))
        #expect(refused.json["responseCode"] == "ExchangeAuthFailed", "\(refused.bodyText)")
        // Nor does a revoked or forged one.
        let revoked = try GraphSimulator.userToken(user.user.email)
        try GraphSimulator.control("/revoke", ["mail": user.user.email])
        #expect(try user.register(with: api, token: TestSecrets.apnsToken(), accessToken: revoked).json["responseCode"] == "ExchangeAuthFailed")
        #expect(try user.register(with: api, token: TestSecrets.apnsToken(),
                                  accessToken: "eyJforged.token.x").json["responseCode"] == "ExchangeAuthFailed")
        _ = try GraphSimulator.newMail(user.user.email, subject: "Two devices")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: second,
            subject: "Two devices").isEmpty && !user.pushes(to: user.token, subject: "Two devices").isEmpty })
    }

    /// Forged Graph tokens from one address hold that device and that address (429,
    /// Graph not asked), never the mailbox: the owner's new device on another network
    /// (127.0.0.2) still joins with its own token.
    @Test func forgedTokensHoldTheirDeviceAndAddressNotTheMailbox() throws {
        let user = try GraphMailboxUser.register(with: api)
        let forger = TestSecrets.apnsToken()
        for attempt in 0..<5 {
            let refused = try user.register(with: api, token: forger, accessToken: "eyJforged.\(attempt).x")
            #expect(refused.json["responseCode"] == "ExchangeAuthFailed", "\(refused.bodyText)")
        }
        #expect(try user.register(with: api, token: forger, accessToken: "eyJforged.5.x").status == 429)
        #expect(try user.register(with: api, token: TestSecrets.apnsToken(), accessToken: "eyJforged.6.x").status == 429)
        let elsewhere = try DeviceClient(token: api.token, from: "127.0.0.2")
        let phone = TestSecrets.apnsToken()
        let joined = try user.register(with: elsewhere, token: phone, accessToken: try GraphSimulator.userToken(user.user.email))
        #expect(joined.json["responseCode"] == "UserUpdated", "\(joined.status) \(joined.bodyText)")
    }

    @Test func aNewRegistrationOfTheSameMailboxKeepsItsLiveSubscription() throws {
        let user = try GraphMailboxUser.register(with: api)
        let first = try subscriptionID(user)
        let again = try user.register(with: api, token: user.token, accessToken: try GraphSimulator.userToken(user.user.email), force: true)
        #expect(again.json["responseCode"] == "UserSubscribed", "\(again.bodyText)")
        #expect(try GraphSimulator.live(of: user.user.email).map { $0["id"] as? String } == [first])
    }

    @Test func aMailboxOutsideTheAdminsScopeIsNotSubscribed() throws {
        let email = "o\(UUID().uuidString.prefix(8).lowercased())@contoso.test"
        try GraphSimulator.user(email)
        try GraphSimulator.control("/scope", ["tenant": GraphSimulator.contoso, "mails": ["someone-else@contoso.test"]])
        defer { _ = try? GraphSimulator.control("/scope", ["tenant": GraphSimulator.contoso, "mails": NSNull()]) }
        let user = GraphMailboxUser(user: try api.newUser(email: email), token: TestSecrets.apnsToken(), objectID: "")
        let answer = try user.register(with: api, token: user.token, accessToken: try GraphSimulator.userToken(email))
        #expect(answer.json["responseCode"] == "ExchangeError", "\(answer.bodyText)")
        #expect(try GraphSimulator.live(of: email).isEmpty)
    }

    // MARK: The notification endpoint

    /// Graph's handshake is answered on ENS's own notification URLs only. Echoing the
    /// token for any /graph/ path let anyone have this host "validate" a URL ENS never
    /// made; a forged path now gets what any forged post gets, 202 and no echo.
    @Test func theValidationHandshakeEchoesTheDecodedTokenOnlyOnAGenuineURL() throws {
        // The simulator's own handshakes (both URLs, tokens needing decoding) passed at registration.
        let user = try GraphMailboxUser.register(with: api)
        #expect(try GraphSimulator.stats()["validations_failed"] as? Int == 0)
        // The subscription's notification URL, as Graph holds it (a post prepared, not sent).
        let prepared = try GraphSimulator.control("/newmail", ["mail": user.user.email, "subject": "Handshake", "deliver": false])
        let url = try #require((prepared["notifications"] as? [[String: Any]])?.first?["url"] as? String)
        let path = String(url[try #require(url.range(of: "/graph/")).lowerBound...])
        let query = "?validationToken=Validation%3A%20Testing%20client%2Bapplication%2Fa%3D"
        let genuine = try TestStack.post(path + query, body: [], contentType: "text/plain; charset=utf-8")
        #expect(genuine.status == 200)
        #expect(genuine.header("content-type")?.hasPrefix("text/plain") == true)
        #expect(genuine.bodyText == "Validation: Testing client+application/a=")

        var altered = Array(path)
        altered[path.count / 2 + 5] = altered[path.count / 2 + 5] == "A" ? "B" : "A"
        for forged in ["/graph/1/1/AAAAAAAAAAAAAAAAAAAAAA", "/graph/anything", String(altered), "/graph/r2." + String(repeating: "A", count: 59)] {
            let answer = try TestStack.post(forged + query, body: [], contentType: "text/plain; charset=utf-8")
            #expect(answer.status == 202, "\(forged)")
            #expect(!answer.bodyText.contains("Validation"), "\(forged) echoed the token")
        }
    }

    @Test func graphShapedTrafficNeverGetsA4xxAndForgeriesAreDropped() throws {
        let user = try GraphMailboxUser.register(with: api)
        let subscription = try subscriptionID(user)
        let forged: [String: Any] = ["value": [[
            "subscriptionId": subscription, "clientState": "guessed", "changeType": "created", "tenantId": GraphSimulator.contoso,
            "resource": "Users/\(user.objectID)/Messages/AAMkForged=", "resourceData": ["id": "AAMkForged="],
        ]]]
        for body in [forged, ["value": "nope"], ["nothing": 1]] as [Any] {
            let answer = try postRaw(user, body)
            #expect(answer.status == 202, "\(answer)")
        }
        #expect(try postRaw(user, "not json at all").status == 202)
        // A lifecycle event has no resource, and is accepted (202 exactly).
        let lifecycle = try postRaw(user,
            ["value": [["subscriptionId": subscription, "clientState": "guessed", "lifecycleEvent": "missed"]]], lifecycle: true)
        #expect(lifecycle.status == 202)
        // A forged URL: still 202, nothing happens.
        let bogus = try TestStack.post("/graph/1/1/AAAAAAAAAAAAAAAAAAAAAA", body: Array(#"{"value":[]}"#.utf8), contentType: "application/json")
        #expect(bogus.status == 202)
        Thread.sleep(forTimeInterval: 1)
        #expect(user.pushes(to: user.token).isEmpty, "no forged item reached the device")
        let metrics = try TestStack.metrics().bodyText
        #expect(metrics.contains(#"ens_mail_events_total{backend="graph",outcome="dropped_client_state"}"#))
    }

    @Test func aBatchSpanningSubscriptionsAndTenantsReachesEveryDevice() throws {
        let contoso = try GraphMailboxUser.register(with: api)
        let fabrikam = try GraphMailboxUser.register(with: api, tenant: GraphSimulator.fabrikam, domain: "fabrikam.test")
        let answer = try GraphSimulator.control("/newmail-batch", ["items": [
            ["mail": contoso.user.email, "subject": "Batch one", "fromName": "Ann", "fromAddress": "ann@elsewhere.test"],
            ["mail": fabrikam.user.email, "subject": "Batch two", "fromName": "Bob", "fromAddress": "bob@elsewhere.test"],
        ], "wait": true])
        #expect(GraphSimulator.statuses(answer["deliveries"] as? [[String: Any]] ?? []).allSatisfy { $0 == 202 }, "\(answer)")
        #expect(TestStack.eventually(within: 20) {
            !contoso.pushes(to: contoso.token, subject: "Batch one").isEmpty && !fabrikam.pushes(to: fabrikam.token, subject: "Batch two").isEmpty
        })
    }

    @Test func duplicatesAndRedeliveriesArePushedOnce() throws {
        let user = try GraphMailboxUser.register(with: api)
        try GraphSimulator.control("/mode", ["duplicates": true, "reorder": true])
        defer { _ = try? GraphSimulator.control("/mode", ["duplicates": false, "reorder": false]) }
        _ = try GraphSimulator.newMail(user.user.email, subject: "Twice sent", count: 3)
        #expect(TestStack.eventually(within: 20) { user.pushes(to: user.token, subject: "Twice sent").count >= 3 })
        Thread.sleep(forTimeInterval: 2)
        #expect(user.pushes(to: user.token, subject: "Twice sent").count == 3, "each message once, though Graph sent each twice")
        let metrics = try TestStack.metrics().bodyText
        #expect(metrics.contains(#"ens_mail_events_total{backend="graph",outcome="duplicate"}"#))
    }

    @Test func throttlingAndVanishedMessagesStillGiveAGenericAlert() throws {
        let user = try GraphMailboxUser.register(with: api)
        try GraphSimulator.fail("get-message", status: 404, code: "ErrorItemNotFound", count: 1, onlyFor: user.user.email)
        _ = try GraphSimulator.newMail(user.user.email, subject: "Moved away")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token).isEmpty })
        let generic = try #require(user.pushes(to: user.token).first)
        let alert = (generic.payload["aps"] as? [String: Any])?["alert"] as? [String: String]
        #expect(alert?["title"] == "New mail" && alert?["body"] != "Moved away")

        try GraphSimulator.fail("get-message", status: 429, code: "ApplicationThrottled", retryAfter: 30, count: 1, onlyFor: user.user.email)
        let before = try GraphSimulator.requests("get-message", of: user.user.email)
        _ = try GraphSimulator.newMail(user.user.email, subject: "Throttled one")
        _ = try GraphSimulator.newMail(user.user.email, subject: "Throttled two")
        #expect(TestStack.eventually(within: 20) { user.pushes(to: user.token).count >= 3 })
        let after = try GraphSimulator.requests("get-message", of: user.user.email)
        #expect(after - before == 1, "inside Retry-After ENS does not ask again")
        #expect(user.pushes(to: user.token, subject: "Throttled two").isEmpty)
        #expect(try GraphSimulator.violations().filter { $0.contains("Retry-After") }.isEmpty)
    }

    /// Eight notifications of one mailbox at once, spread by nginx over both responder
    /// processes, while Graph holds each request 700 ms: the processes together never
    /// have more than Graph's four requests in flight for the mailbox (Graph would answer
    /// a fifth 429 MailboxConcurrency), and every message still reaches the phone, those
    /// that found no room as a generic alert.
    @Test func aBurstForOneMailboxStaysWithinGraphsConcurrencyLimitAcrossProcesses() throws {
        let user = try GraphMailboxUser.register(with: api)
        _ = try GraphSimulator.control("/hold", ["mail": user.user.email, "ms": 700])
        defer { _ = try? GraphSimulator.control("/hold", ["mail": user.user.email, "ms": 0]) }
        let senders = try (0..<8).map { index in
            try OSThread.start { _ = try? GraphSimulator.newMail(user.user.email, subject: "Burst \(index)") }
        }
        for sender in senders { sender.join() }
        #expect(TestStack.eventually(within: 20) { user.pushes(to: user.token).count >= 8 }, "\(user.pushes(to: user.token).count) pushes")
        let stats = try GraphSimulator.stats()
        #expect((stats["throttled"] as? NSNumber)?.intValue == 0, "Graph never had to refuse a fifth request")
        let most = ((stats["max_in_flight"] as? [String: Any])?[user.user.email.lowercased()] as? NSNumber)?.intValue ?? 0
        #expect(most >= 2 && most <= 4, "\(most) requests in flight at most: \(stats)")
    }

    @Test func aSenderOutageIsAnswered503AndGraphsRetryDeliversOnce() throws {
        let user = try GraphMailboxUser.register(with: api)
        try TestStack.stack("sender-stop")
        var restarted = false
        defer { if !restarted { _ = try? TestStack.stack("sender-start") } }
        let deliveries = try GraphSimulator.newMail(user.user.email, subject: "While down")
        #expect(GraphSimulator.statuses(deliveries) == [503], "\(deliveries)")
        try TestStack.stack("sender-start")
        restarted = true
        #expect(TestStack.eventually(within: 60) { !user.pushes(to: user.token, subject: "While down").isEmpty })
        Thread.sleep(forTimeInterval: 2)
        #expect(user.pushes(to: user.token, subject: "While down").count == 1)
    }

    @Test func killingTheSenderMidBurstLosesNoAcknowledgedNotification() throws {
        let user = try GraphMailboxUser.register(with: api)
        // Under the test stack's cap of 40 pushes per record and minute, which the
        // redeliveries after 503 must not be charged against twice.
        let total = 30
        let burst = try OSThread.start {
            _ = try? GraphSimulator.newMail(user.user.email, subject: "Burst", count: total, wait: true)
        }
        _ = TestStack.eventually(within: 20) { user.pushes(to: user.token, subject: "Burst").count >= 10 }
        let victim = TestStack.pids(matching: "ens-sender --config").first
        #expect(victim != nil, "the sender runs, so it can be killed")
        if let pid = victim {
            kill(pid, SIGKILL)
            _ = TestStack.eventually(within: 10) { kill(pid, 0) != 0 }
        }
        try TestStack.stack("sender-start")
        burst.join()
        // Every message reaches the phone: its push's id derives from the message, whether
        // it carries sender and subject or (a lookup that found the mailbox's four Graph
        // requests busy with the redeliveries) is a generic alert.
        #expect(TestStack.eventually(within: 120) { Set(user.pushes(to: user.token).compactMap(\.collapseID)).count == total },
                "delivered \(Set(user.pushes(to: user.token).compactMap(\.collapseID)).count) of \(total)")
        #expect(user.pushes(to: user.token, subject: "Burst").count >= total / 2, "most with sender and subject")
    }

    /// Graph gives up on an attempt after 3 s and sends the batch again while the first
    /// request may still be handing it on. The claim commits with the hand-off, so the
    /// redelivery waits for it: a duplicate if it went through, its own to deliver if it
    /// failed, and after `claimWaitSeconds` a conflict (answered 503: Graph retries).
    @Test func aRedeliveryWaitsForTheHandOffStillUnderWay() throws {
        let user = try GraphMailboxUser.register(with: api)
        let record = try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)")?.decode(Int64.self))
        let vault = Vault(masterKey: try TestStack.masterKey())
        let store = MailSubscriptionStore(database: database, vault: vault)
        struct HandOffFailed: Error {}
        for (outcome, holdSeconds) in [("fails", 1.0), ("succeeds", 1.0), ("takes too long", Double(MailSubscriptionStore.claimWaitSeconds) + 1.5)] {
            let item = (0..<16).map { _ in UInt8.random(in: 0...255) }
            // The order of events proves the waiting: the redelivery cannot answer before
            // the first request lets go of the claim, unless it gives up first.
            let events = SynchronizedValues<String>()
            var waiter: OSThread?
            do {
                try database.transaction {
                    #expect(try store.claimItems(recordID: record, keys: [item], now: .now()) == [item])
                    waiter = try OSThread.start {
                        do {
                            let other = MailSubscriptionStore(database: try TestStack.serviceConnection(), vault: vault)
                            events.append(try other.claimItems(recordID: record, keys: [item], now: .now()).isEmpty ? "duplicate" : "claimed")
                        } catch let error as MariaDBError where error.kind == .conflict {
                            events.append("conflict")
                        } catch {
                            events.append("error \(error)")
                        }
                    }
                    Thread.sleep(forTimeInterval: holdSeconds)
                    events.append(outcome == "succeeds" ? "committing" : "rolling back")
                    if outcome != "succeeds" { throw HandOffFailed() }
                }
            } catch is HandOffFailed {}
            waiter?.join()
            switch outcome {
            case "fails": #expect(events.values == ["rolling back", "claimed"], "\(events.values)")
            case "succeeds": #expect(events.values == ["committing", "duplicate"], "\(events.values)")
            default: #expect(events.values == ["conflict", "rolling back"], "\(events.values)")
            }
        }
    }

    /// ENS asks the token endpoint once per tenant and process, not per notification;
    /// when Graph refuses the held token (revoked), the next lookup fetches a new one and
    /// the notification still carries sender and subject.
    @Test func applicationTokensAreReusedAndReplacedWhenRevoked() throws {
        let user = try GraphMailboxUser.register(with: api)
        func issued() throws -> Int {
            ((try GraphSimulator.stats()["tokens_issued"] as? [String: Any])?[GraphSimulator.contoso] as? NSNumber)?.intValue ?? 0
        }
        // Each responder process (two in the test stack) fetches one when it first needs
        // one; which process takes which notification is the web server's choice (under
        // load one may take the first few alone), so fifteen notifications may fetch two
        // tokens at most, where without the cache they would fetch fifteen.
        let before = try issued()
        for round in 0..<15 { _ = try GraphSimulator.newMail(user.user.email, subject: "Cached \(round)") }
        #expect(TestStack.eventually(within: 20) { (0..<15).allSatisfy { !user.pushes(to: user.token, subject: "Cached \($0)").isEmpty } })
        let warm = try issued()
        #expect(warm - before <= 2, "at most one per responder process for fifteen notifications: \(warm - before)")

        _ = try GraphSimulator.control("/revoke", ["tenant": GraphSimulator.contoso])
        _ = try GraphSimulator.newMail(user.user.email, subject: "After revocation")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "After revocation").isEmpty })
        #expect(try issued() > warm, "a refused token is replaced")
        let violations = try GraphSimulator.violations()
        #expect(violations.isEmpty, "\(violations)")
    }

    /// Notification URLs seal the record id and generation (`r2.`...); a subscription
    /// created before carries `<record>/<generation>/<mac>` for life (Graph keeps the URL
    /// through renewals), and that form still delivers. A forged MAC delivers nothing.
    @Test func aSubscriptionFromBeforeSealedRoutingTokensStillDelivers() throws {
        let user = try GraphMailboxUser.register(with: api)
        let answer = try GraphSimulator.control("/newmail", ["mail": user.user.email, "subject": "Older URL", "deliver": false])
        let notification = try #require((answer["notifications"] as? [[String: Any]])?.first)
        let url = try #require(notification["url"] as? String)
        let body = try #require(notification["body"] as? String)
        let row = try #require(try database.queryOne("SELECT id, generation FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)"))
        let (recordID, generation) = try row.decode(Int64.self, Int64.self)
        #expect(url.contains("/graph/r2.") && !url.contains("/graph/\(recordID)/"), "\(url)")

        let macKey = try TestStack.masterKey().derivedBytes(label: "ens/v1/routing-mac")
        let mac = Array(Digest.hmacSHA256(key: macKey, message: Array("ens-graph-route/1/\(recordID)/\(generation)".utf8)).prefix(16))
        let forged = try TestStack.post("/graph/\(recordID)/\(generation)/\(Base64.encodeURLSafe(Array(repeating: 0, count: 16)))",
                                        body: Array(body.utf8), contentType: "application/json")
        #expect(forged.status == 202)
        let older = try TestStack.post("/graph/\(recordID)/\(generation)/\(Base64.encodeURLSafe(mac))",
                                       body: Array(body.utf8), contentType: "application/json")
        #expect(older.status == 202)
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "Older URL").isEmpty })
        Thread.sleep(forTimeInterval: 1)
        #expect(user.pushes(to: user.token, subject: "Older URL").count == 1, "the forged one delivered nothing")
    }

    // MARK: Lifecycle and renewal

    @Test func missedBecomesOneGenericAlertPerDevice() throws {
        let user = try GraphMailboxUser.register(with: api)
        let outcome = try GraphSimulator.control("/lifecycle", ["mail": user.user.email, "event": "missed", "wait": true])
        #expect("\(outcome)".contains("202"), "\(outcome)")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token).isEmpty })
        Thread.sleep(forTimeInterval: 1)
        #expect(user.pushes(to: user.token).count == 1)
        let alert = (user.pushes(to: user.token)[0].payload["aps"] as? [String: Any])?["alert"] as? [String: String]
        #expect(alert?["title"] == "New mail")
    }

    /// Lifecycle events are answered within seconds, by the responder that heard them,
    /// right after its 202: Graph pauses a subscription whose reauthorization does not
    /// come (the simulator after `reauthorizeGraceSeconds` of real time), and a removed
    /// one hears nothing until it exists again. No ens-cron run is involved.
    @Test func lifecycleEventsAreAnsweredWithinSecondsWithoutWaitingForCron() throws {
        let user = try GraphMailboxUser.register(with: api)
        let first = try subscriptionID(user)
        _ = try GraphSimulator.control("/mode", ["reauthorizeGraceSeconds": 8])
        // Right after the registration: renewals are never repeated within ten minutes, so
        // the renewal is due ten minutes after it (not dropped, not at half the lifetime),
        // and neither the responder nor a cron run renews now.
        _ = try GraphSimulator.control("/lifecycle", ["mail": user.user.email, "event": "reauthorizationRequired", "wait": true])
        let spaced = try #require(try recordColumns(user).renewAfterHours)
        #expect(spaced > 0.14 && spaced <= 10.0 / 60, "renewal due ten minutes after the registration, not \(spaced) h")
        _ = try cron(["renew"])
        #expect((try GraphSimulator.live(of: user.user.email).first?["renewals"] as? NSNumber)?.intValue ?? 0 == 0)

        // Eleven minutes later (the registration made to look older), the same event is
        // answered by a renewal within the grace Graph gives.
        try database.execute("UPDATE EnsSubscriptionInfo SET renewed_at = NOW(3) - INTERVAL 11 MINUTE WHERE userid = \(user.user.userID)")
        let event = Date()
        _ = try GraphSimulator.control("/lifecycle", ["mail": user.user.email, "event": "reauthorizationRequired", "wait": true])
        #expect(try TestStack.eventually(within: 8) {
            (try GraphSimulator.live(of: user.user.email).first?["renewals"] as? NSNumber)?.intValue == 1
        }, "renewed before Graph pauses the subscription")
        // Past the grace: still live, because it was renewed in time.
        Thread.sleep(forTimeInterval: max(0, 9 - Date().timeIntervalSince(event)))
        let renewed = try #require(try GraphSimulator.live(of: user.user.email).first)
        #expect(renewed["id"] as? String == first && renewed["state"] as? String == "live", "\(renewed)")
        #expect((renewed["reauthorizations"] as? NSNumber)?.intValue ?? 0 == 0, "ENS renews (PATCH), never reauthorizes as well")
        #expect(try recordColumns(user).renewAfterHours.map { $0 > 34 } == true)

        // Removed (a password reset, say) right after that renewal: a new subscription
        // exists within seconds (a new one is not a renewal), and mail flows again.
        _ = try GraphSimulator.control("/lifecycle", ["mail": user.user.email, "event": "subscriptionRemoved", "wait": true])
        var recreated: String?
        #expect(try TestStack.eventually(within: 10) {
            recreated = try GraphSimulator.live(of: user.user.email).first?["id"] as? String
            return recreated != nil && recreated != first
        })
        #expect(try recordColumns(user).subscription == recreated)
        _ = try GraphSimulator.newMail(user.user.email, subject: "After removal")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "After removal").isEmpty })
        let violations = try GraphSimulator.violations()
        #expect(violations.isEmpty, "\(violations)")
    }

    /// A subscription created at Graph but never recorded here (a crash between the two)
    /// makes the next create answer 409: ENS finds it and reuses it when it carries the
    /// record's generation (its clientState matches), else deletes it and creates anew.
    @Test func aConflictReusesOurOwnSubscriptionAndReplacesAStaleOne() throws {
        let user = try GraphMailboxUser.register(with: api)
        let original = try subscriptionID(user)
        // The record lost track of it: the renewal's PATCH finds nothing (404), the create 409s.
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET subscription_id = 'ffffffff-0000-4000-8000-000000000000',
                renewed_at = NOW(3) - INTERVAL 1 DAY, renew_after = NOW(3) WHERE userid = \(user.user.userID)
            """)
        _ = try cron(["renew"])
        #expect(try recordColumns(user).subscription == original, "the existing subscription is reused")
        let live = try GraphSimulator.live(of: user.user.email)
        #expect(live.count == 1 && live.first?["id"] as? String == original && (live.first?["renewals"] as? NSNumber)?.intValue == 1, "\(live)")
        #expect(try GraphSimulator.requests("create", of: user.user.email) >= 2, "the registration's create and the one that met 409")

        // Now the record has moved on (a newer generation): the subscription Graph holds
        // carries the old generation's clientState and URL, so it is deleted and replaced.
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET generation = generation + 1, subscription_id = 'ffffffff-0000-4000-8000-000000000001',
                renewed_at = NOW(3) - INTERVAL 1 DAY, renew_after = NOW(3) WHERE userid = \(user.user.userID)
            """)
        try TestStack.rebind(userID: user.user.userID, database: database)
        _ = try cron(["renew"])
        let replaced = try #require(try recordColumns(user).subscription)
        #expect(replaced != original)
        #expect(try GraphSimulator.live(of: user.user.email).map { $0["id"] as? String } == [replaced])
        _ = try GraphSimulator.newMail(user.user.email, subject: "After the conflict")
        #expect(TestStack.eventually(within: 20) { !user.pushes(to: user.token, subject: "After the conflict").isEmpty })
        let violations = try GraphSimulator.violations()
        #expect(violations.isEmpty, "\(violations)")
    }

    @Test func aSubscriptionENSMayNoLongerRenewWakesItsDevices() throws {
        let user = try GraphMailboxUser.register(with: api)
        try database.execute("""
            UPDATE EnsSubscriptionInfo
            SET renewed_at = NOW(3) - INTERVAL 1 DAY, renew_after = NOW(3)
            WHERE userid = \(user.user.userID)
            """)
        try GraphSimulator.fail("patch", status: 403, code: "ErrorAccessDenied", count: 1)
        _ = try cron(["renew"])
        let status = try api.call("/getsubscriptionstatusv2", [
            "userid": user.user.userID, "subscriptionPayload": try user.user.sealJSON(["pushToken": user.token, "ignoreLastMessageDate": 1]),
        ])
        #expect(status.json["responseCode"] == "UserRecordPresentNotSubscribed", "\(status.bodyText)")
        #expect(TestStack.eventually(within: 20) { user.pushes(to: user.token).contains { $0.pushType == "background" } })
    }

    @Test func graphCallbacksNeverReachTheWebServersLogs() throws {
        let user = try GraphMailboxUser.register(with: api)
        _ = try GraphSimulator.newMail(user.user.email, subject: "Unlogged")
        _ = try TestStack.post("/graph/1/2/x?validationToken=abc", body: [], contentType: "text/plain")
        _ = try TestStack.get("/graph/405-check")
        let logs = try FileManager.default.contentsOfDirectory(atPath: TestStack.directory + "/log").filter { $0.hasPrefix("nginx")
            || $0.hasPrefix("apache") }
        for log in logs {
            let text = (try? String(contentsOfFile: TestStack.directory + "/log/" + log, encoding: .utf8)) ?? ""
            #expect(!text.contains("/graph/"), "\(log) mentions a Graph notification URL")
        }
    }
}
