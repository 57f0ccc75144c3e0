import Curl
import Foundation
import MariaDB
import POSIX
import Testing
@testable import ENSSender
@testable import MailBackends

/// What one mailbox's callbacks can do to everyone else, and what ENS answers Exchange
/// when it could not take a batch: caps on items, devices and pushes per record, and a
/// 503 (Exchange redelivers) for every ens-sender refusal but a malformed notification.
/// The test stack caps pushes at 40 per record per minute (scripts/test.sh).
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct CallbackLimitsTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("callback-limits-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.reset()
    }

    func alerts(to token: String) -> [String] {
        APNsSimulator.accepted().filter { $0.token == token }.compactMap {
            ((($0.payload["aps"] as? [String: Any])?["alert"]) as? [String: String])?["body"]
        }
    }

    @Test func aBusySenderMeansExchangeRetriesAndTheMailStillArrives() throws {
        let registered = try RegisteredUser.register(with: api)
        // A responder keeps its connections to ens-sender between hand-offs, and a kept one
        // is served however full the intake is; a reload lets them go.
        #expect(try TestStack.reloadResponders(with: try String(contentsOfFile: TestStack.configPath, encoding: .utf8)))
        // Every intake connection taken: ens-sender answers "busy" to the responder. The
        // connections the reload let go may still count until the intake sees them
        // close, so more are held until the intake refuses one.
        let socket = TestStack.directory + "/run/apns.sock"
        var held: [Int32] = []
        defer { held.forEach(FileDescriptor.close) }
        for _ in 0..<Ingest.maximumConnections { held.append(try UnixSocket.connect(path: socket)) }
        var full = false
        for _ in 0..<32 where !full {
            let probe = try UnixSocket.connect(path: socket)
            FileDescriptor.setTimeouts(probe, milliseconds: 300)
            if (try? FileDescriptor.read(probe)) != nil {
                full = true  // "busy" (or the hang-up after it): refused
                FileDescriptor.close(probe)
            } else {
                held.append(probe)  // nothing within 300 ms: accepted, and now held
            }
        }
        #expect(full, "the intake refuses a connection once it holds its most")
        let callbacks = try ExchangeSimulator.newMail(registered.user.email, subject: "While busy", fromName: "Ann")
        #expect(callbacks.first?["httpStatus"] as? Int == 503, "\(callbacks)")
        held.forEach(FileDescriptor.close)
        held = []
        // Exchange's retry (20x faster in tests) brings it through.
        #expect(TestStack.eventually(within: 30) { !registered.pushes(to: registered.token, subject: "While busy").isEmpty })
    }

    @Test func aBatchOverTheItemCapBecomesOneSummaryPerDevice() throws {
        let registered = try RegisteredUser.register(with: api)
        let callbacks = try ExchangeSimulator.newMail(registered.user.email, subject: "Flood", fromName: "Spammer", count: 51)
        #expect(callbacks.first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { alerts(to: registered.token).contains("51 new messages") })
        #expect(alerts(to: registered.token).filter { $0 == "Flood" }.isEmpty)
    }

    /// The callback limits follow `systemctl reload` (SIGHUP) without a restart: with
    /// exchange.max_items_per_callback lowered to 2, a batch of three becomes a summary;
    /// restored, three are pushed one by one. The workers say what they applied.
    @Test func aReloadChangesTheItemCapWithoutARestart() throws {
        let original = try String(contentsOfFile: TestStack.configPath, encoding: .utf8)
        let workers = Set(TestStack.pids(matching: "ens-fcgi --worker"))
        defer { _ = try? TestStack.reloadResponders(with: original) }
        #expect(try TestStack.reloadResponders(with: original + "\nexchange.max_items_per_callback = 2\n",
                                               applied: "exchange.max_items_per_callback"),
                "the supervisor and each worker apply it")
        let registered = try RegisteredUser.register(with: api)
        _ = try ExchangeSimulator.newMail(registered.user.email, subject: "Reloaded", fromName: "Ann", count: 3)
        #expect(TestStack.eventually(within: 20) { alerts(to: registered.token).contains("3 new messages") })
        #expect(alerts(to: registered.token).filter { $0 == "Reloaded" }.isEmpty)

        #expect(try TestStack.reloadResponders(with: original))
        _ = try ExchangeSimulator.newMail(registered.user.email, subject: "Restored", fromName: "Ann", count: 3)
        #expect(TestStack.eventually(within: 20) { alerts(to: registered.token).filter { $0 == "Restored" }.count == 3 })
        #expect(Set(TestStack.pids(matching: "ens-fcgi --worker")) == workers, "no worker restarted")
    }

    @Test func pushesPerRecordPerMinuteAreCappedSummarizedThenDropped() throws {
        let registered = try RegisteredUser.register(with: api)
        let email = registered.user.email
        // 30 of the 40 allowed this minute.
        _ = try ExchangeSimulator.newMail(email, subject: "First thirty", fromName: "Ann", count: 30)
        #expect(TestStack.eventually(within: 20) { alerts(to: registered.token).filter { $0 == "First thirty" }.count == 30 })
        // 30 more do not fit: one summary instead (31).
        _ = try ExchangeSimulator.newMail(email, subject: "Next thirty", fromName: "Ann", count: 30)
        #expect(TestStack.eventually(within: 20) { alerts(to: registered.token).contains("30 new messages") })
        #expect(alerts(to: registered.token).filter { $0 == "Next thirty" }.isEmpty)
        // Nine single mails fill the minute (40); the tenth is answered OK and not pushed.
        for index in 0..<9 { _ = try ExchangeSimulator.newMail(email, subject: "Single \(index)", fromName: "Ann") }
        let over = try ExchangeSimulator.newMail(email, subject: "Over the cap", fromName: "Ann")
        #expect(over.first?["subscriptionStatus"] as? String == "OK")
        #expect(TestStack.eventually(within: 20) { alerts(to: registered.token).contains("Single 8") })
        Thread.sleep(forTimeInterval: 1)
        #expect(!alerts(to: registered.token).contains("Over the cap"))
        // Another user is not affected.
        let other = try RegisteredUser.register(with: api)
        #expect(try other.mailReaches(other.token, subject: "Someone else's mail"))
    }

    @Test func aRecordKeepsAtMostTwentyDevicesDroppingTheLeastRecentlyActive() throws {
        let registered = try RegisteredUser.register(with: api)
        try database.execute("""
            UPDATE Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row SET d.last_checkin_at = NOW(3) - INTERVAL 1 DAY
            WHERE s.userid = \(registered.user.userID)
            """)
        var tokens: [String] = []
        for _ in 0..<20 {
            let token = TestSecrets.apnsToken()
            tokens.append(token)
            #expect(try registered.register(with: api, token: token).json["responseCode"] == "UserUpdated")
        }
        let count = try database.queryOne("""
            SELECT COUNT(*) FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(registered.user.userID)
            """)?.int(0)
        #expect(count == 20)
        // The first device, silent for a day, made room. It had supplied the live
        // subscription's credentials, which left with it (docs/security.md, "The
        // lifecycle"): the subscription ended, a remaining device's check-in says so, and
        // its registration supplies fresh credentials; then all twenty hear new mail.
        let payload = try registered.user.sealJSON(["pushToken": tokens[19], "ignoreLastMessageDate": 1])
        #expect(try api.call("/getsubscriptionstatusv2", ["userid": registered.user.userID, "subscriptionPayload": payload])
            .json["responseCode"] == "UserRecordPresentNotSubscribed")
        #expect(try registered.register(with: api, token: tokens[19]).json["responseCode"] == "UserSubscribed")
        #expect(try registered.mailReaches(tokens[19], subject: "To twenty devices"))
        #expect(TestStack.eventually(within: 10) { tokens.allSatisfy { !registered.pushes(to: $0, subject: "To twenty devices").isEmpty } })
        #expect(registered.pushes(to: registered.token, subject: "To twenty devices").isEmpty)
    }

    // MARK: Forged posts

    /// The attack the per-subscription rate limit used to invite: record ids are
    /// sequential and nginx keyed the limit on the record id in the path, so anyone could
    /// post forged callbacks at a record's id until Exchange's real callbacks got 429, and
    /// after StatusFrequency of those the subscription lapsed. Now the limit is keyed on
    /// the whole callback URL, which only Exchange holds. With nginx at 1 r/s (bursts as
    /// in production, 100 per URL), forged posts at the record's id are refused once their
    /// own bucket is empty, and Exchange's real callback still delivers.
    @Test(.enabled(if: TestStack.front == "nginx", "restarts nginx with low limits"))
    func forgedPostsAtARecordIDDoNotThrottleItsSubscription() throws {
        let registered = try RegisteredUser.register(with: api)
        let (url, _) = try callbackURL(registered)
        let row = try #require(try database.queryOne("SELECT id, generation FROM EnsSubscriptionInfo WHERE userid = \(registered.user.userID)"))
        let (recordID, generation) = try row.decode(Int64.self, Int64.self)
        // Today's URL does not even say which record it is for.
        #expect(url.contains("/ews/k2.") && !url.contains("/ews/\(recordID)/") && !url.contains("/\(generation)/"), "\(url)")

        try TestStack.stack("nginx-stop")
        defer {
            _ = try? TestStack.stack("nginx-stop")
            _ = try? TestStack.stack("nginx-start")
        }
        try TestStack.run("/usr/bin/env", ["ENS_RATE=1", TestStack.root + "/scripts/stack.sh", "nginx-start"])
        let client = try TestStack.client()
        let forged = "/ews/\(recordID)/\(generation)/k." + String(repeating: "A", count: 64)
        let flood = try (0..<200).map { _ in
            try TestStack.post(forged, body: Array("<x/>".utf8), contentType: "text/xml", client: client).status
        }
        #expect(flood.contains(429), "the flood met its limit")
        #expect(flood.allSatisfy { $0 == 403 || $0 == 429 }, "\(Set(flood))")
        // Another guess at the same record: a bucket of its own again (403, not 429).
        #expect(try TestStack.post("/ews/\(recordID)/\(generation)/AAAA", body: Array("<x/>".utf8),
                                   contentType: "text/xml", client: client).status == 403)

        let callbacks = try ExchangeSimulator.newMail(registered.user.email, subject: "Despite the flood", fromName: "Ann")
        #expect(callbacks.first?["httpStatus"] as? Int == 200, "\(callbacks)")
        #expect(callbacks.first?["subscriptionStatus"] as? String == "OK", "\(callbacks)")
        #expect(TestStack.eventually(within: 20) { !registered.pushes(to: registered.token, subject: "Despite the flood").isEmpty })
    }

    // MARK: Error-only callbacks

    func callbackURL(_ registered: RegisteredUser) throws -> (url: String, subscriptionID: String) {
        let subscription = try #require(try ExchangeSimulator.subscriptions(of: registered.user.email).last)
        return (try #require(subscription["url"] as? String), try #require(subscription["id"] as? String))
    }

    func postError(to url: String, subscriptionID: String?) throws -> HTTPResponse {
        let notification = subscriptionID.map { "<m:Notification><t:SubscriptionId>\($0)</t:SubscriptionId></m:Notification>" } ?? ""
        let body = """
            <?xml version="1.0" encoding="utf-8"?><soap11:Envelope xmlns:soap11="http://schemas.xmlsoap.org/soap/envelope/">\
            <soap11:Body><m:SendNotification xmlns:m="http://schemas.microsoft.com/exchange/services/2006/messages" \
            xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types"><m:ResponseMessages>\
            <m:SendNotificationResponseMessage ResponseClass="Error"><m:MessageText>gone</m:MessageText>\
            <m:ResponseCode>ErrorReadEventsFailed</m:ResponseCode>\(notification)</m:SendNotificationResponseMessage>\
            </m:ResponseMessages></m:SendNotification></soap11:Body></soap11:Envelope>
            """
        let path = String(url.dropFirst("https://localhost:\(TestStack.port)".count))
        return try TestStack.post(path, body: Array(body.utf8), contentType: "text/xml; charset=utf-8")
    }

    func registeredFlag(_ registered: RegisteredUser) throws -> Int64? {
        try database.queryOne("SELECT registered FROM EnsSubscriptionInfo WHERE userid = \(registered.user.userID)")?.int(0)
    }

    @Test func anErrorOnlyCallbackMustNameTheSubscriptionItEnds() throws {
        let registered = try RegisteredUser.register(with: api)
        let (url, subscriptionID) = try callbackURL(registered)
        // No subscription id: refused, nothing changes.
        #expect(try postError(to: url, subscriptionID: nil).status == 400)
        #expect(try registeredFlag(registered) == 1)
        // Another subscription's: that one is told to stop, the live one stays.
        let other = try postError(to: url, subscriptionID: "c29tZW9uZS1lbHNl")
        #expect(other.status == 200 && other.bodyText.contains("Unsubscribe"))
        #expect(try registeredFlag(registered) == 1)
        // The live one's: the record is no longer subscribed (devices re-register).
        #expect(try postError(to: url, subscriptionID: subscriptionID).status == 200)
        #expect(try registeredFlag(registered) == 0)
    }
}
