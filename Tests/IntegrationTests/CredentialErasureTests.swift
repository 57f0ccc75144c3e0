import Codecs
import Curl
@testable import ENSModel
@testable import ENSVault
import Foundation
import MariaDB
import OpenSSL
import Testing

/// When stored credentials are erased (docs/security.md, "The lifecycle"): with the
/// lapse of their subscription, and when the device that supplied them leaves. Each
/// test is the failure it stops: after the erasure, new mail sends no request with
/// those credentials to the Exchange simulator (it records every request's operation
/// and auth kind), and the rows are gone. Every erased row's sealed bytes are
/// remembered, so the secret scan at the end of `make test` proves they are not in
/// the final database dump either.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct CredentialErasureTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("credential-erasure-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.domain("pox.test", mode: "pox-root")
    }

    func recordID(_ user: RegisteredUser) throws -> Int64 {
        try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(user.user.userID)")?.decode(Int64.self))
    }

    /// Stored and fresh credential rows of the record.
    func credentialRows(_ record: Int64) throws -> (stored: Int64, fresh: Int64) {
        let row = try #require(try database.queryOne("""
            SELECT (SELECT COUNT(*) FROM MailCredentials WHERE record_id = \(record)),
                   (SELECT COUNT(*) FROM MailCredentialsFresh WHERE record_id = \(record))
            """))
        return (try row.int(0), try row.int(1))
    }

    func registered(_ record: Int64) throws -> Bool {
        try database.queryOne("SELECT registered FROM EnsSubscriptionInfo WHERE id = \(record)")?.decode(Bool.self) ?? false
    }

    /// Every sealed credential of the record, remembered for the secret scan: once
    /// erased, none may be found in the database dump.
    func rememberSealedRows(_ record: Int64) throws {
        for row in try database.query("SELECT sealed FROM MailCredentials WHERE record_id = \(record)") {
            TestSecrets.remember(Hex.encode(try row.decode([UInt8].self)))
        }
        for row in try database.query("SELECT box FROM MailCredentialsFresh WHERE record_id = \(record)") {
            TestSecrets.remember(Hex.encode(try row.decode([UInt8].self)))
        }
    }

    /// A check-in of `token`; with `password`, it carries new credentials.
    func checkIn(_ user: RegisteredUser, token: String, password: String? = nil) throws -> [String: String] {
        var parameters = [
            "userid": user.user.userID,
            "subscriptionPayload": try user.user.sealJSON(["pushToken": token, "ignoreLastMessageDate": 1]),
        ]
        if let password {
            parameters["creds"] = try user.user.sealForDevice(["userName": user.user.email, "password": password], token: token,
                                                              for: "getsubscriptionstatusv2.creds")
            parameters["email"] = user.user.email
        }
        return try api.call("/getsubscriptionstatusv2", parameters).json
    }

    /// New mail that Exchange announces to the subscription it still holds: its
    /// callback's answer, and the mailbox lookups (GetItem, GetFolder) that reached the
    /// simulator meanwhile, with the auth kind each carried.
    func newMailLookups(_ user: RegisteredUser, subject: String) throws -> (answer: String?, lookups: [String]) {
        let before = try ExchangeSimulator.requests().count
        let callbacks = try ExchangeSimulator.newMail(user.user.email, subject: subject, fromName: "Erin Example")
        let lookups = try ExchangeSimulator.requests().dropFirst(before).filter { ["GetItem", "GetFolder"].contains($0["operation"] as? String) }
        return (callbacks.first?["subscriptionStatus"] as? String, lookups.map { "\($0["operation"] ?? "") \($0["auth"] ?? "")" })
    }

    // MARK: A lapsed subscription

    /// Exchange stopped calling back (ENS was unreachable past the heartbeat and its
    /// grace): `ens-cron renew` marks the subscription lapsed and erases its stored
    /// credentials and the fresh ones a check-in left, in the same transaction. If
    /// Exchange calls again, nothing opens: Unsubscribe, and no lookup carries the
    /// password. The device hears it is not subscribed and registers again.
    @Test func aLapsedSubscriptionsCredentialsAreErasedByRenew() throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        let changed = "Changed-\(UUID().uuidString.prefix(8))"
        TestSecrets.remember(changed)
        // The password changed at Exchange; the device offers the new one.
        try ExchangeSimulator.mailbox(user.user.email, userName: user.user.email, password: changed)
        #expect(try checkIn(user, token: user.token, password: changed)["credentials"] == "Stored")
        #expect(try credentialRows(record) == (1, 1))
        try rememberSealedRows(record)

        try database.execute("UPDATE EnsSubscriptionInfo SET last_callback_at = NOW(3) - INTERVAL 1 DAY WHERE id = \(record)")
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["renew", "--config", TestStack.configPath])
        #expect(try !registered(record))
        #expect(try credentialRows(record) == (0, 0))

        let late = try newMailLookups(user, subject: "After the lapse")
        #expect(late.answer == "Unsubscribe")
        #expect(late.lookups.isEmpty, "\(late.lookups)")
        #expect(try checkIn(user, token: user.token)["responseCode"] == "UserRecordPresentNotSubscribed")
        // Registering again (with the changed password) brings credentials again.
        #expect(try user.register(with: api,
            token: user.token, creds: user.creds(token: user.token, password: changed)).json["responseCode"] == "UserSubscribed")
        #expect(try user.mailReaches(user.token, subject: "Registered again"))
    }

    // MARK: The device that supplied them leaves

    /// The token hash of the device whose credentials the record's live subscription
    /// uses (MailCredentials.supplied_by), and what a token's hash is.
    func supplier(_ record: Int64) throws -> [UInt8]? {
        guard let row = try database.queryOne("""
            SELECT c.supplied_by FROM MailCredentials c JOIN EnsSubscriptionInfo s ON s.id = c.record_id AND s.generation = c.generation
            WHERE c.record_id = \(record)
            """) else { return nil }
        return try row.decode([UInt8]?.self)
    }

    func hash(_ token: String) throws -> [UInt8] {
        Vault(masterKey: try TestStack.masterKey()).tokenHash(try #require(DeviceToken(sent: token)))
    }

    func unregister(_ user: RegisteredUser, _ token: String) throws -> String? {
        try api.call("/unregister", ["userid": user.user.userID,
                                     "token": try user.user.sealForDevice(["apnsToken": token], token: token,
                                                                          for: "unregister.token")]).json["responseCode"]
    }

    /// The owner's second phone joined (its proof left its credentials for the
    /// subscription, and the next callback took them: now the subscription runs on
    /// them). Then it is unregistered, handed on, say: its credentials are erased at
    /// once and the subscription ends; new mail sends nothing to Exchange with them;
    /// the first phone hears it is not subscribed, and registering again brings its
    /// own credentials back into use.
    @Test func unregisteringTheSupplyingDeviceErasesItsCredentialsAndEndsTheSubscription() throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        #expect(try supplier(record) == hash(user.token))
        let second = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        #expect(try user.mailReaches(second, subject: "Both phones"))
        #expect(try supplier(record) == hash(second))
        try rememberSealedRows(record)

        #expect(try unregister(user, second) == "DeviceUnregistered")
        #expect(try credentialRows(record) == (0, 0))
        #expect(try !registered(record))
        #expect(try checkIn(user, token: user.token)["responseCode"] == "UserRecordPresentNotSubscribed")
        let late = try newMailLookups(user, subject: "After the second phone left")
        #expect(late.answer == "Unsubscribe")
        #expect(late.lookups.isEmpty, "\(late.lookups)")

        #expect(try user.register(with: api, token: user.token).json["responseCode"] == "UserSubscribed")
        #expect(try supplier(record) == hash(user.token))
        #expect(try user.mailReaches(user.token, subject: "Own credentials again"))
    }

    /// A device whose credentials nobody took yet leaves: only what it offered goes;
    /// the subscription keeps the owner's and delivers with sender and subject.
    @Test func aDeviceThatSuppliedNothingInUseLeavesTheOwnersCredentials() throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        let visitor = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: visitor).json["responseCode"] == "UserUpdated")
        #expect(try credentialRows(record) == (1, 1))
        for row in try database.query("SELECT box FROM MailCredentialsFresh WHERE record_id = \(record)") {
            TestSecrets.remember(Hex.encode(try row.decode([UInt8].self)))
        }
        #expect(try unregister(user, visitor) == "DeviceUnregistered")
        #expect(try credentialRows(record) == (1, 0))
        #expect(try registered(record))
        #expect(try supplier(record) == hash(user.token))
        #expect(try user.mailReaches(user.token, subject: "Still the owner's"))
    }

    /// /updatedevice gives the same phone a new push token: nobody left, so the
    /// credentials it supplied follow it and stay in use.
    @Test func aNewPushTokenKeepsTheCredentialsItsDeviceSupplied() throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        let renewed = TestSecrets.apnsToken()
        let answer = try api.call("/updatedevice", [
            "userid": user.user.userID,
            "token": try user.user.sealForDevice(["oldApnsToken": user.token, "apnsToken": renewed], token: user.token, for: "updatedevice.token"),
        ])
        #expect(answer.json["responseCode"] == "UpdateSuccess")
        #expect(try supplier(record) == hash(renewed))
        #expect(try registered(record))
        #expect(try user.mailReaches(renewed, subject: "Same phone, new token"))
    }

    /// The phone that subscribed was lost and never checked in again: `ens-cron reap`
    /// removes it after devices.retention and its credentials with it (the fresh ones
    /// the second phone left were sealed to a key inside them, and go too); the second
    /// phone is told to register again.
    @Test func reapingTheSupplyingDeviceErasesItsCredentials() throws {
        let user = try RegisteredUser.register(with: api)
        let record = try recordID(user)
        let second = TestSecrets.apnsToken()
        #expect(try user.register(with: api, token: second).json["responseCode"] == "UserUpdated")
        #expect(try credentialRows(record) == (1, 1))
        try rememberSealedRows(record)
        try database.execute("""
            UPDATE Devices SET last_checkin_at = NOW(3) - INTERVAL 31 DAY WHERE subscription_row = \(record) AND token_hash = \(try hash(user.token))
            """)
        let reaped = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["reap", "--config", TestStack.configPath])
        #expect(reaped.contains("subscriptions ended with the device"), "\(reaped)")
        #expect(try credentialRows(record) == (0, 0))
        #expect(try !registered(record))
        #expect(try database.queryOne("SELECT COUNT(*) FROM Devices WHERE subscription_row = \(record)")?.int(0) == 1)
        #expect(try checkIn(user, token: second)["responseCode"] == "UserRecordPresentNotSubscribed")
        let late = try newMailLookups(user, subject: "After the lost phone was reaped")
        #expect(late.lookups.isEmpty, "\(late.lookups)")
    }
}
