import Curl
import Foundation
import MariaDB
import Testing

/// A device through the operations a client performs over its life, end to end against
/// the Exchange and APNs simulators: what it set up before an operation keeps working
/// after it.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct DeviceLifecycleTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("lifecycle-tests"))
        database = try TestStack.serviceConnection()
        try ExchangeSimulator.reset()
    }

    func updateSyncKey(_ registered: RegisteredUser, token: String, key: String) throws -> String? {
        TestSecrets.remember(key)
        let info = try registered.user.sealForDevice(["apnsToken": token, "backgroundSyncKey": key,
                                                      "syncKeyExpirationTime": "01/01/2099 00:00:00.000"],
                                                     token: token, for: "updatesynckey.info")
        return try api.call("/updatesynckey", ["userid": registered.user.userID, "info": info]).json["responseCode"]
    }

    func updateDevice(_ registered: RegisteredUser, old: String, new: String) throws -> String? {
        let sealed = try registered.user.sealForDevice(["oldApnsToken": old, "apnsToken": new], token: old, for: "updatedevice.token")
        return try api.call("/updatedevice", ["userid": registered.user.userID, "token": sealed]).json["responseCode"]
    }

    /// APNs gave the app a new token; the sync key it stored for the old one still
    /// rides along with new mail (it used to be sealed to the old token's hash, and
    /// every callback for the user then failed with 500 until the key expired).
    @Test func theSyncKeyFollowsTheDeviceToItsNewToken() throws {
        let registered = try RegisteredUser.register(with: api)
        let key = "kek-\(UUID().uuidString)"
        #expect(try updateSyncKey(registered, token: registered.token, key: key) == "UpdateSuccess")
        let newToken = TestSecrets.apnsToken()
        #expect(try updateDevice(registered, old: registered.token, new: newToken) == "UpdateSuccess")

        let callbacks = try ExchangeSimulator.newMail(registered.user.email, subject: "After a token change", fromName: "Ann")
        #expect(callbacks.first?["httpStatus"] as? Int == 200, "\(callbacks)")
        #expect(TestStack.eventually(within: 20) { !registered.pushes(to: newToken, subject: "After a token change").isEmpty })
        let push = try #require(registered.pushes(to: newToken, subject: "After a token change").first)
        #expect(push.payload["backgroundSyncKey"] as? String == key)
        #expect(registered.pushes(to: registered.token, subject: "After a token change").isEmpty)
    }

    /// The same when the new token was already registered (the two rows merge): the
    /// device keeps the key it set.
    @Test func theSyncKeySurvivesAMergeIntoAnExistingToken() throws {
        let registered = try RegisteredUser.register(with: api)
        let key = "kek-\(UUID().uuidString)"
        #expect(try updateSyncKey(registered, token: registered.token, key: key) == "UpdateSuccess")
        let newToken = TestSecrets.apnsToken()
        // Registered under the new token by the same phone: with the same secret.
        var creds = registered.creds(token: newToken)
        creds["deviceSecret"] = TestSecrets.deviceSecret(for: registered.token)
        #expect(try registered.register(with: api, token: newToken, creds: creds).json["responseCode"] == "UserUpdated")
        #expect(try updateDevice(registered, old: registered.token, new: newToken) == "UpdateSuccess")
        #expect(try registered.mailReaches(newToken, subject: "After a merge"))
        let push = try #require(registered.pushes(to: newToken, subject: "After a merge").first)
        #expect(push.payload["backgroundSyncKey"] as? String == key)
    }

    /// APNs rejected the token: the device hears it must register again (it used to
    /// hear UserSubscribed until the reaper removed it), and registering re-enables it.
    /// A v1 check-in, which proves no device, hears nothing of it: the rejection happens
    /// when a push is tried, so the flip would tell anyone polling v1 when mail came.
    @Test func aDeviceWhoseTokenAPNsRejectedIsToldToRegisterAgain() throws {
        let registered = try RegisteredUser.register(with: api)
        let checkIn = { () throws -> String? in
            let payload = try registered.user.sealJSON(["pushToken": registered.token, "ignoreLastMessageDate": 1])
            return try api.call("/getsubscriptionstatusv2", ["userid": registered.user.userID, "subscriptionPayload": payload]).json["responseCode"]
        }
        let checkInV1 = { () throws -> String? in
            try api.call("/getsubscriptionstatus", ["userid": registered.user.userID]).json["responseCode"]
        }
        #expect(try checkIn() == "UserSubscribed")
        try APNsSimulator.fail(token: registered.token, status: 410, reason: "Unregistered", count: 1)
        _ = try ExchangeSimulator.newMail(registered.user.email, subject: "To a dead token", fromName: "Ann")
        #expect(try TestStack.eventually(within: 20) {
            try database.queryOne("""
                SELECT d.disabled_at IS NOT NULL FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
                WHERE s.userid = \(registered.user.userID)
                """)?.int(0) == 1
        })
        #expect(try checkIn() == "UserRecordPresentNotSubscribed")
        #expect(try checkInV1() == "UserSubscribed")
        #expect(try registered.register(with: api, token: registered.token).json["responseCode"] == "UserUpdated")
        #expect(try checkIn() == "UserSubscribed")
        #expect(try checkInV1() == "UserSubscribed")
    }

    /// The original contract's /updatedevice: a bare sealed token confirms a device
    /// registered the original contract's way (without a secret); it changes nothing of
    /// a device that registered a secret (the push service could send it).
    @Test func aBareSealedTokenConfirmsTheDevice() throws {
        let registered = try RegisteredUser.register(with: api)
        let refused = try api.call("/updatedevice", ["userid": registered.user.userID, "token": try registered.user.seal(registered.token)],
                                   headers: [("badge", "1")])
        #expect(refused.status == 400)
        let legacy = TestSecrets.apnsToken()
        #expect(try registered.register(with: api, token: legacy, sealedFor: nil, withSecret: false).json["responseCode"] == "UserUpdated")
        let bare = try registered.user.seal(legacy)
        #expect(try api.call("/updatedevice", ["userid": registered.user.userID, "token": bare],
                             headers: [("badge", "1")]).json["responseCode"] == "UpdateSuccess")
        let badges = try database.query("""
            SELECT d.badge
            FROM Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(registered.user.userID)
            ORDER BY d.id
            """).map { try $0.int(0) }
        #expect(badges == [0, 1])
        let unknown = try registered.user.seal(TestSecrets.apnsToken())
        #expect(try api.call("/updatedevice", ["userid": registered.user.userID, "token": unknown]).json["responseCode"] == "UpdateFail")
        let garbage = try registered.user.seal("not a token")
        #expect(try api.call("/updatedevice", ["userid": registered.user.userID, "token": garbage]).status == 400)
    }

    /// A token as iOS's NSData.description prints it is the same device as its hex.
    @Test func aTokenInAngleBracketsWithSpacesIsTheSameDevice() throws {
        let registered = try RegisteredUser.register(with: api)
        let hex = TestSecrets.apnsToken()
        var spaced = ""
        for (index, character) in hex.uppercased().enumerated() {
            if index > 0 && index % 8 == 0 { spaced.append(" ") }
            spaced.append(character)
        }
        #expect(try registered.register(with: api, token: "<\(spaced)>").json["responseCode"] == "UserUpdated")
        #expect(try registered.register(with: api, token: hex).json["responseCode"] == "UserAlreadySubscribed")
        #expect(try registered.mailReaches(hex, subject: "To the bracketed token"))
        let sealed = try registered.user.sealForDevice(["apnsToken": hex], token: hex, for: "unregister.token")
        #expect(try api.call("/unregister", ["userid": registered.user.userID, "token": sealed]).json["responseCode"] == "DeviceUnregistered")
    }

    /// /getpublickey with `userid` alone, as the original contract's clients send it.
    @Test func theUseridAloneGetsTheKey() throws {
        let registered = try RegisteredUser.register(with: api)
        let answer = try api.call("/getpublickey", ["userid": registered.user.userID])
        #expect(answer.status == 200)
        #expect(answer.json["pubKey"] == registered.user.publicKeyPEM)
        #expect(answer.json["responseCode"] == "UserAlreadySubscribed")
        let fresh = String(repeating: "0123456789abcdef", count: 4)
        let created = try api.call("/getpublickey", ["userid": fresh])
        #expect(created.status == 200 && created.json["userid"] == fresh && created.json["pubKey"]?.hasPrefix("-----BEGIN PUBLIC KEY-----") == true)
        #expect(try api.call("/getpublickey", ["email": "not an address"]).status == 400)
    }
}
