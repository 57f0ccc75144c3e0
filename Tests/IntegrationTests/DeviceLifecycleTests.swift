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
        let info = try registered.user.sealJSON(["apnsToken": token, "backgroundSyncKey": key, "syncKeyExpirationTime": "01/01/2099 00:00:00.000"])
        return try api.call("/updatesynckey", ["userid": registered.user.userID, "info": info]).json["responseCode"]
    }

    func updateDevice(_ registered: RegisteredUser, old: String, new: String) throws -> String? {
        let sealed = try registered.user.sealJSON(["oldApnsToken": old, "apnsToken": new])
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
        #expect(try registered.register(with: api, token: newToken).json["responseCode"] == "UserUpdated")
        #expect(try updateDevice(registered, old: registered.token, new: newToken) == "UpdateSuccess")
        #expect(try registered.mailReaches(newToken, subject: "After a merge"))
        let push = try #require(registered.pushes(to: newToken, subject: "After a merge").first)
        #expect(push.payload["backgroundSyncKey"] as? String == key)
    }
}
