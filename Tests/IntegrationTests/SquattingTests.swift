import Curl
import Foundation
import MariaDB
import Testing
@testable import MailBackends

/// A mailbox squatted before its owner arrives: someone holding the app's ApiToken
/// registers an address nobody has registered yet (or whose subscription lapsed) at an
/// EWS of their own that says yes to everything. The owner then registers normally.
/// The owner's credentials must never reach the squatter's server, the owner ends up
/// with working mail from the real Exchange, and nothing the squatter's server sends
/// reaches the owner's phone (docs/security.md, "Whose Exchange a device trusts").
/// Through nginx, against the Exchange simulator, whose "hostile" domain plays the
/// squatter's server.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct SquattingTests {
    let api: DeviceClient
    let database: Connection
    static let squattersEWS = "https://mail.evil.test/EWS/Exchange.asmx"

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("squatting-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.reset()
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
        try ExchangeSimulator.domain("evil.test", mode: "hostile")
    }

    /// An owner with a mailbox at the real Exchange (pox.test) who has not registered yet,
    /// and a record the squatter subscribed at their own server first.
    func squattedOwner() throws -> (owner: RegisteredUser, squatterToken: String) {
        try Self.squattedOwner(api: api, domain: "pox.test")
    }

    /// As `squattedOwner()`, for an address at `domain`.
    static func squattedOwner(api: DeviceClient, domain: String) throws -> (owner: RegisteredUser, squatterToken: String) {
        let email = "o\(UUID().uuidString.prefix(8).lowercased())@\(domain)"
        let password = "Own-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(password)
        try ExchangeSimulator.mailbox(email, userName: email, password: password)
        let owner = RegisteredUser(user: try api.newUser(email: email), password: password, token: TestSecrets.apnsToken())
        let squatterToken = TestSecrets.apnsToken()
        let squatted = try owner.register(with: api, token: squatterToken,
                                          creds: owner.creds(token: squatterToken, userName: "anyone",
                                                             password: "anything", ewsURL: Self.squattersEWS))
        try #require(squatted.json["responseCode"] == "UserSubscribed", "\(squatted.bodyText)")
        return (owner, squatterToken)
    }

    func requests(to host: String) throws -> [[String: Any]] {
        try ExchangeSimulator.requests().filter { ($0["host"] as? String) == host }
    }

    func ownerRegisters(_ owner: RegisteredUser, force: Bool = false) throws -> String? {
        try owner.register(with: api, token: owner.token, force: force).json["responseCode"]
    }

    @Test func theOwnersCredentialsNeverReachTheSquattersServer() throws {
        let (owner, squatterToken) = try squattedOwner()
        let seenBefore = try requests(to: "mail.evil.test").count
        // A normal registration (no force): the device's own address leads to its own
        // Exchange, so it subscribes there instead of proving itself at the stored URL.
        #expect(try ownerRegisters(owner) == "UserSubscribed")
        let sentToSquatter = try requests(to: "mail.evil.test").dropFirst(seenBefore)
        #expect(sentToSquatter.isEmpty, "\(Array(sentToSquatter))")
        // The record now watches the real Exchange, and the owner's mail arrives.
        let url = try database.queryOne("SELECT backend_url FROM EnsSubscriptionInfo WHERE userid = \(owner.user.userID)")?.optionalText(0)
        #expect(url?.contains("pox.test") == true)
        #expect(try owner.mailReaches(owner.token, subject: "For the owner only"))
        // The squatter's device, still on the record, is bound to its own server: it
        // hears nothing of the owner's mailbox.
        #expect(owner.pushes(to: squatterToken, subject: "For the owner only").isEmpty)
        #expect(!APNsSimulator.accepted().contains { $0.token == squatterToken })
    }

    @Test func theSquattersServerCanPushNothingToTheOwner() throws {
        let (owner, squatterToken) = try squattedOwner()
        let squatterURL = try #require(try requests(to: "mail.evil.test").compactMap { $0["subscribeUrl"] as? String }.last)
        #expect(try ownerRegisters(owner) == "UserSubscribed")
        // What the squatter's server can still do: call its callback URL with new mail.
        let answer = try postNewMail(to: squatterURL, subscriptionID: "c3F1YXR0ZXI=")
        #expect(answer.status == 200 && answer.bodyText.contains("Unsubscribe"), "\(answer.status) \(answer.bodyText)")
        Thread.sleep(forTimeInterval: 1)
        #expect(!APNsSimulator.accepted().contains { $0.token == owner.token || $0.token == squatterToken })
    }

    @Test func aLapsedSquattedRecordGoesToItsOwnerAndTheSquatterHearsNothing() throws {
        let (owner, squatterToken) = try squattedOwner()
        // The squatter's subscription lapsed (a missed heartbeat: ens-cron's renewal job).
        try database.execute("UPDATE EnsSubscriptionInfo SET registered = 0 WHERE userid = \(owner.user.userID)")
        let seenBefore = try requests(to: "mail.evil.test").count
        #expect(try ownerRegisters(owner) == "UserSubscribed")
        #expect(try requests(to: "mail.evil.test").count == seenBefore)
        #expect(try owner.mailReaches(owner.token, subject: "After the lapse"))
        #expect(owner.pushes(to: squatterToken, subject: "After the lapse").isEmpty)
    }

    @Test func theSquatterCannotTakeTheRecordBack() throws {
        let (owner, squatterToken) = try squattedOwner()
        #expect(try ownerRegisters(owner) == "UserSubscribed")
        let subscribesBefore = try requests(to: "mail.evil.test").filter { ($0["operation"] as? String) == "Subscribe" }.count
        for force in [false, true] {
            let again = try owner.register(with: api, token: squatterToken,
                                           creds: owner.creds(token: squatterToken, userName: "anyone",
                                                              password: "anything", ewsURL: Self.squattersEWS),
                                           force: force)
            #expect(again.json["responseCode"] == "ExchangeAuthFailed", "\(again.bodyText)")
        }
        #expect(try requests(to: "mail.evil.test").filter { ($0["operation"] as? String) == "Subscribe" }.count == subscribesBefore)
        #expect(try owner.mailReaches(owner.token, subject: "Still the owner's"))
        #expect(owner.pushes(to: squatterToken, subject: "Still the owner's").isEmpty)
    }

    @Test func theSquattersCheckInCannotPlantCredentialsInTheOwnersSubscription() throws {
        let (owner, squatterToken) = try squattedOwner()
        #expect(try ownerRegisters(owner) == "UserSubscribed")
        let payload = try owner.user.sealJSON(["pushToken": squatterToken, "ignoreLastMessageDate": 1])
        let creds = try owner.user.sealJSON(["userName": owner.user.email, "password": "locks-the-account"])
        TestSecrets.remember("locks-the-account")
        let answer = try api.call("/getsubscriptionstatusv2", ["userid": owner.user.userID, "subscriptionPayload": payload, "creds": creds])
        #expect(answer.json["responseCode"] == "UserRecordPresentNotSubscribed")
        #expect(answer.json["credentials"] != "Stored")
        let fresh = try database.queryOne("""
            SELECT COUNT(*) FROM MailCredentialsFresh f JOIN EnsSubscriptionInfo s ON s.id = f.record_id WHERE s.userid = \(owner.user.userID)
            """)?.int(0)
        #expect(fresh == 0)
    }

    @Test func theOwnersSecondDeviceJoinsAtTheRealExchangeWithoutASecondSubscription() throws {
        let (owner, _) = try squattedOwner()
        #expect(try ownerRegisters(owner) == "UserSubscribed")
        let subscriptions = try ExchangeSimulator.subscriptions(of: owner.user.email).count
        let second = TestSecrets.apnsToken()
        #expect(try owner.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        #expect(try ExchangeSimulator.subscriptions(of: owner.user.email).count == subscriptions)
        #expect(try owner.mailReaches(second, subject: "To both of the owner's phones"))
        #expect(!owner.pushes(to: owner.token, subject: "To both of the owner's phones").isEmpty)
    }

    /// No Autodiscover confirms either server (nowhere.test publishes none, and neither
    /// host is on exchange.allowed_hosts): the squatter named their own server first, the
    /// owner names theirs. The owner proves the password at their own server and gets a
    /// subscription of their own there (a claim): the owner's phones hear the owner's
    /// mail, the squatter's phone hears nothing of it, nothing of the owner's reaches the
    /// squatter's server, and the squatter cannot join the owner's claim.
    @Test func anOwnerWhoseServerNothingConfirmsGetsTheirOwnMail() throws {
        try ExchangeSimulator.domain("nowhere.test", mode: "none")
        let (owner, squatterToken) = try Self.squattedOwner(api: api, domain: "nowhere.test")
        let email = owner.user.email
        let seenBefore = try requests(to: "mail.evil.test").count

        let ownEWS = "https://mail.nowhere.test/EWS/Exchange.asmx"
        let registered = try owner.register(with: api, token: owner.token, creds: owner.creds(token: owner.token, ewsURL: ownEWS))
        #expect(registered.json["responseCode"] == "UserSubscribed", "\(registered.bodyText)")
        #expect(try requests(to: "mail.evil.test").count == seenBefore, "the owner's registration reached the squatter's server")
        // The user's record keeps the squatter's subscription; the owner's is a claim beside it.
        let rows = try database.query("""
            SELECT backend_url, claim_of IS NOT NULL FROM EnsSubscriptionInfo WHERE userid = \(owner.user.userID) OR claim_of = \(owner.user.userID)
            ORDER BY id
            """).map { try $0.decode(String?.self, Bool.self) }
        #expect(rows.count == 2 && rows[0].0 == Self.squattersEWS && !rows[0].1 && rows[1].0 == ownEWS && rows[1].1, "\(rows)")
        #expect(try owner.mailReaches(owner.token, subject: "From the owner's own server"))
        #expect(owner.pushes(to: squatterToken, subject: "From the owner's own server").isEmpty)
        #expect(!APNsSimulator.accepted().contains { $0.token == squatterToken })

        // The owner's phone checks in as subscribed; a second phone joins the claim
        // without a second Subscribe.
        let payload = try owner.user.sealJSON(["pushToken": owner.token, "ignoreLastMessageDate": 1],
                                              for: "getsubscriptionstatusv2.subscriptionPayload")
        let status = try api.call("/getsubscriptionstatusv2", ["userid": owner.user.userID, "subscriptionPayload": payload])
        #expect(status.json["responseCode"] == "UserSubscribed", "\(status.bodyText)")
        let subscriptions = try ExchangeSimulator.subscriptions(of: email).count
        let second = TestSecrets.apnsToken()
        #expect(try owner.register(with: api, token: second, creds: owner.creds(token: second, ewsURL: ownEWS)).json["responseCode"] == "UserUpdated")
        #expect(try ExchangeSimulator.subscriptions(of: email).count == subscriptions)
        #expect(try owner.mailReaches(second, subject: "To both of the owner's phones"))

        // The squatter cannot join the claim without the owner's password.
        let other = TestSecrets.apnsToken()
        let joined = try owner.register(with: api, token: other,
                                        creds: owner.creds(token: other, userName: email, password: "a-guess", ewsURL: ownEWS))
        #expect(joined.json["responseCode"] == "ExchangeAuthFailed", "\(joined.bodyText)")
        #expect(try owner.mailReaches(owner.token, subject: "Still only the owner's"))
        #expect(owner.pushes(to: other, subject: "Still only the owner's").isEmpty)

        // The owner's phones leave: the claim goes with them; the squatter's record stays.
        for token in [owner.token, second] {
            let sealed = try owner.user.sealForDevice(["apnsToken": token], token: token, for: "unregister.token")
            #expect(try api.call("/unregister", ["userid": owner.user.userID, "token": sealed]).json["responseCode"] == "DeviceUnregistered")
        }
        let left = try database.query("""
            SELECT claim_of IS NOT NULL FROM EnsSubscriptionInfo WHERE userid = \(owner.user.userID) OR claim_of = \(owner.user.userID)
            """).map { try $0.decode(Bool.self) }
        #expect(left == [false], "\(left)")
    }

    /// A SendNotification with one NewMailEvent, as the squatter's server would post it.
    func postNewMail(to url: String, subscriptionID: String) throws -> HTTPResponse {
        let body = """
            <?xml version="1.0" encoding="utf-8"?><soap11:Envelope xmlns:soap11="http://schemas.xmlsoap.org/soap/envelope/">\
            <soap11:Body><m:SendNotification xmlns:m="http://schemas.microsoft.com/exchange/services/2006/messages" \
            xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types"><m:ResponseMessages>\
            <m:SendNotificationResponseMessage ResponseClass="Success"><m:ResponseCode>NoError</m:ResponseCode>\
            <m:Notification><t:SubscriptionId>\(subscriptionID)</t:SubscriptionId><t:PreviousWatermark>AQAAAA==</t:PreviousWatermark>\
            <t:MoreEvents>false</t:MoreEvents><t:NewMailEvent><t:Watermark>AQAAAB==</t:Watermark>\
            <t:TimeStamp>2026-11-27T05:00:00Z</t:TimeStamp><t:ItemId Id="c3F1YXR0ZWQtaXRlbQ==" ChangeKey="CQAAAA=="/>\
            <t:ParentFolderId Id="aW5ib3g=" ChangeKey="AQAAAA=="/></t:NewMailEvent></m:Notification>\
            </m:SendNotificationResponseMessage></m:ResponseMessages></m:SendNotification></soap11:Body></soap11:Envelope>
            """
        let path = String(url.dropFirst("https://localhost:\(TestStack.port)".count))
        return try TestStack.post(path, body: Array(body.utf8), contentType: "text/xml; charset=utf-8")
    }
}
