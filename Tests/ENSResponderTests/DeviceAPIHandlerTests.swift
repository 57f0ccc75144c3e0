internal import ENSModel
import ENSHTTP
import ENSTestSupport
import Codecs
@testable import ENSConfig
@testable import ENSStore
@testable import ENSVault
@testable import ENSResponder
import Foundation
import Logging
import MariaDB
import OpenSSL
import Synchronization
import Testing
@testable import MailBackends

/// Every device-API handler, in-process: the real router and dispatcher on a
/// MemoryRequest (no nginx, no libfcgi), the stack's MariaDB, parameters sealed by the
/// openssl CLI, and a scripted mail backend in place of Exchange.
@Suite(.serialized, .enabled(if: InProcess.databaseIsAvailable, "needs the database scripts/test.sh starts"))
struct DeviceAPIHandlerTests {
    let database: Connection
    let configuration: ENSConfiguration
    let registrar = ScriptedRegistrar(.subscribed(endpoint: ScriptedRegistrar.endpoint))
    let context: RequestContext

    init() throws {
        database = try InProcess.stackDatabase()
        configuration = try ENSConfiguration.load(path: StackDatabase.directory + "/ens.conf")
        context = Self.context(database, registrar, configuration)
    }

    static func context(_ database: any SQLDatabase, _ registrar: ScriptedRegistrar, _ configuration: ENSConfiguration) -> RequestContext {
        let services = SharedServices(
            vault: Vault(masterKey: try! configuration.secrets.masterKey()), apiTokens: APITokenSet(path: "/nonexistent",
                                                                                                    checkInterval: .seconds(3600)),
            privateKeys: PrivateKeyCache(capacity: 16), liveness: LivenessRecorder(), mailBackends: MailRegistrars(fallback: registrar)
        )
        return RequestContext(settings: configuration, services: services, database: database,
                              logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    /// A user: an address, its userid, and the record's key once /getpublickey made it.
    struct User {
        let email = "inproc-\(UUID().uuidString.lowercased())@example.test"
        var userID: String { Hex.encode(Digest.sha256(email)) }
        var key: RSAPrivateKey?

        func seal(_ object: [String: Any]) throws -> String {
            try Shell.sealWithCLI(Array(try JSONSerialization.data(withJSONObject: object)), for: try #require(key))
        }

        func seal(_ text: String) throws -> String {
            try Shell.sealWithCLI(Array(text.utf8), for: try #require(key))
        }
    }

    func call(_ path: String, _ parameters: [String: Any], context: RequestContext? = nil, headers: [String: String] = [:]) throws -> MemoryRequest {
        try InProcess.call(path, parameters, context: context ?? self.context, headers: headers)
    }

    /// /getpublickey for a new address; the record's key is read back through the store.
    func newUser() throws -> User {
        var user = User()
        let answer = try call("/getpublickey", ["userid": user.userID, "email": user.email])
        #expect(answer.status == 200 && answer.responseCode == "UserRecordPresentNotSubscribed")
        #expect(answer.json["pubKey"]?.hasPrefix("-----BEGIN PUBLIC KEY-----") == true && answer.json["userid"] == user.userID)
        let store = SubscriptionStore(database: database, vault: context.services.vault)
        let record = try #require(try store.record(userID: user.userID))
        user.key = try store.privateKey(of: record)
        #expect(try user.key?.publicKeyPEM == answer.json["pubKey"])
        return user
    }

    func register(_ user: User, token: String, force: Bool = false, headers: [String: String] = [:]) throws -> MemoryRequest {
        var parameters: [String: Any] = ["userid": user.userID, "email": user.email, "bundleid": "com.example.mail",
                                         "creds": try user.seal(["apnsToken": token, "userName": user.email, "password": "secret"])]
        if force { parameters["force"] = 1 }
        return try call("/registerdevicev2", parameters, headers: headers)
    }

    static func token() -> String { Hex.encode((0..<32).map { _ in UInt8.random(in: 0...255) }) }

    @Test func getPublicKeyGivesTheSameKeyTwiceAndSaysWhenSubscribed() throws {
        let user = try newUser()
        let again = try call("/getpublickey", ["userid": user.userID])
        #expect(again.json["pubKey"] == (try user.key?.publicKeyPEM))
        #expect(try register(user, token: Self.token()).responseCode == "UserSubscribed")
        #expect(try call("/getpublickey", ["userid": user.userID]).responseCode == "UserAlreadySubscribed")
    }

    @Test func registrationAnswersEachMailOutcomeWithItsContractCode() throws {
        let user = try newUser()
        let expected: [(MailboxOutcome, Int, String)] = [
            (.autodiscoverFailed, 200, "AutodiscoverFailed"), (.authenticationFailed, 200, "ExchangeAuthFailed"),
            (.endpointNotTrusted, 200, "ExchangeAuthFailed"), (.failed, 200, "ExchangeError"),
            (.throttled(retryAfter: .seconds(900)), 429, "TooManyRequests"), (.busy, 503, "ServiceUnavailable"),
        ]
        for (outcome, status, code) in expected {
            _ = registrar.answering(outcome)
            let refused = try register(user, token: Self.token())
            #expect(refused.status == status && refused.responseCode == code, "\(outcome)")
            #expect((refused.headers["retry-after"] != nil) == (status != 200), "\(outcome)")
        }
        // None of the refused attempts added a device or subscribed the record.
        let store = SubscriptionStore(database: database, vault: context.services.vault)
        let record = try #require(try store.record(userID: user.userID))
        #expect(try store.devices(recordID: record.id).isEmpty && !record.isSubscribed)
        _ = registrar.answering(.subscribed(endpoint: ScriptedRegistrar.endpoint))
        #expect(try register(user, token: Self.token()).responseCode == "UserSubscribed")
        #expect(try store.devices(recordID: record.id).count == 1)
    }

    @Test func aSecondDeviceJoinsBySubscribingOnceThenProving() throws {
        let user = try newUser()
        #expect(try register(user, token: Self.token()).responseCode == "UserSubscribed")
        let second = Self.token()
        #expect(try register(user, token: second).responseCode == "UserUpdated")
        #expect(try register(user, token: second).responseCode == "UserAlreadySubscribed")
        #expect(try register(user, token: second, force: true).responseCode == "UserSubscribed")
        let operations = registrar.calls.withLock { $0.filter { $0.mailbox == user.email }.map(\.operation) }
        #expect(operations == ["subscribe", "prove", "prove", "subscribe"])
        // A proof the backend refuses adds nothing.
        _ = registrar.answering(.authenticationFailed)
        #expect(try register(user, token: Self.token()).responseCode == "ExchangeAuthFailed")
    }

    @Test func sealedOperationsOfAnUnknownUserAreNotFoundAndMissingParametersAre400() throws {
        let stranger = User()
        for (path, parameter) in [("/unregister", "token"), ("/updatedevice", "token"), ("/getsubscriptionstatusv2", "subscriptionPayload"),
                                  ("/updatesynckey", "info"), ("/registerdevicev2", "creds")] {
            var parameters: [String: Any] = ["userid": stranger.userID, parameter: "AAAA", "bundleid": "b"]
            #expect(try call(path, parameters).responseCode == "UserSubscriptionNotFound", "\(path)")
            parameters[parameter] = nil
            #expect(try call(path, parameters).status == 400, "\(path) without \(parameter)")
            #expect(try call(path, [parameter: "AAAA"]).status == 400, "\(path) without userid")
        }
    }

    @Test func aTamperedSealedParameterIs400() throws {
        let user = try newUser()
        var sealed = Array(try user.seal(Self.token()).utf8)
        sealed[10] = sealed[10] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let answer = try call("/unregister", ["userid": user.userID, "token": String(decoding: sealed, as: UTF8.self)])
        #expect(answer.status == 400 && answer.responseCode == "InvalidRequest")
    }

    /// A check-in's `creds` (a client certificate costs key derivations to open, and
    /// they are proven at the server) take a registration place like a registration:
    /// none free, 503, and nothing reaches the backend.
    @Test func aCheckInsCredentialsNeedARegistrationPlace() throws {
        let user = try newUser()
        let token = Self.token()
        let secret = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        let registered = try call("/registerdevicev2", [
            "userid": user.userID, "email": user.email, "bundleid": "com.example.mail",
            "creds": try user.seal(["apnsToken": token, "userName": user.email, "password": "secret", "deviceSecret": secret]),
        ])
        #expect(registered.responseCode == "UserSubscribed")
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let gate = context.services.registrationGate
        Thread.detachNewThread { _ = gate.ifAvailable { held.signal(); release.wait() } }
        held.wait()
        defer { release.signal() }
        let sealedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let answer = try call("/getsubscriptionstatusv2", [
            "userid": user.userID, "email": user.email, "subscriptionPayload": try user.seal(["pushToken": token, "ignoreLastMessageDate": 1]),
            "creds": try user.seal(["userName": user.email, "password": "secret", "deviceSecret": secret,
                                    "purpose": "getsubscriptionstatusv2.creds", "sealedAt": sealedAt]),
        ])
        #expect(answer.status == 503 && answer.responseCode == "ServiceUnavailable")
        #expect(!registrar.calls.withLock { $0.contains { $0.operation == "offer" } })
        // Without creds a check-in needs no place.
        let plain = try call("/getsubscriptionstatusv2",
                             ["userid": user.userID, "subscriptionPayload": try user.seal(["pushToken": token, "ignoreLastMessageDate": 1])])
        #expect(plain.responseCode == "UserSubscribed")
    }

    /// Which backend takes a new subscription may take discovery (DNS and HTTPS to the
    /// address's domain): with every registration place taken, a registration is
    /// answered 503 before any backend is asked, and nothing is looked up.
    @Test func choosingABackendNeedsARegistrationPlace() throws {
        let discovering = ScriptedRegistrar(.subscribed(endpoint: ScriptedRegistrar.endpoint))
        let services = SharedServices(
            vault: context.services.vault, apiTokens: APITokenSet(path: "/nonexistent", checkInterval: .seconds(3600)),
            privateKeys: PrivateKeyCache(capacity: 16), liveness: LivenessRecorder(),
            mailBackends: MailRegistrars(fallback: registrar, preferring: [discovering]))
        let preferring = RequestContext(settings: configuration, services: services, database: database,
                                        logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let user = try newUser()
        let token = Self.token()
        let parameters: [String: Any] = [
            "userid": user.userID, "email": user.email, "bundleid": "com.example.mail",
            "creds": try user.seal(["apnsToken": token, "userName": user.email, "password": "secret"]),
        ]
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let freed = DispatchSemaphore(value: 0)
        let gate = services.registrationGate
        Thread.detachNewThread {
            _ = gate.ifAvailable { held.signal(); release.wait() }
            freed.signal()
        }
        held.wait()
        let busy = try call("/registerdevicev2", parameters, context: preferring)
        release.signal()
        freed.wait()
        #expect(busy.status == 503 && busy.responseCode == "ServiceUnavailable")
        #expect(discovering.calls.withLock { $0.isEmpty })
        // With a place free, the preferred backend is asked and takes it.
        var free = parameters
        free["creds"] = try user.seal(["apnsToken": token, "userName": user.email, "password": "secret"])
        #expect(try call("/registerdevicev2", free, context: preferring).responseCode == "UserSubscribed")
        #expect(discovering.calls.withLock { $0.map(\.operation) } == ["serves", "subscribe"])
    }

    @Test func statusUpdateSyncKeyAndUnregisterFollowTheDevice() throws {
        let user = try newUser()
        let token = Self.token()
        #expect(try register(user, token: token).responseCode == "UserSubscribed")
        let status = try call("/getsubscriptionstatusv2",
                              ["userid": user.userID, "subscriptionPayload": try user.seal(["pushToken": token, "ignoreLastMessageDate": 1])])
        #expect(status.responseCode == "UserSubscribed")
        let v1 = try call("/getsubscriptionstatus", ["userid": user.userID])
        #expect(v1.responseCode == "UserSubscribed")
        let unknown = try call("/getsubscriptionstatusv2",
                               ["userid": user.userID, "subscriptionPayload": try user.seal(["pushToken": Self.token(), "ignoreLastMessageDate": 1])])
        #expect(unknown.responseCode == "UserSubscriptionNotFound")

        let future = "12/31/2099 00:00:00.000"
        let sync = try call("/updatesynckey",
            ["userid": user.userID, "info": try user.seal(["apnsToken": token, "backgroundSyncKey": "k1", "syncKeyExpirationTime": future])])
        #expect(sync.responseCode == "UpdateSuccess")
        let expired = try call("/updatesynckey",
                               ["userid": user.userID,
                                "info": try user.seal(["apnsToken": token, "backgroundSyncKey": "k1",
                                                       "syncKeyExpirationTime": "01/01/2020 00:00:00.000"])])
        #expect(expired.responseCode == "UpdateFail")

        // /updatedevice: a bare token confirms the device; the object form moves it.
        #expect(try call("/updatedevice", ["userid": user.userID, "token": try user.seal(token)]).responseCode == "UpdateSuccess")
        #expect(try call("/updatedevice", ["userid": user.userID, "token": try user.seal(Self.token())]).responseCode == "UpdateFail")
        let moved = Self.token()
        #expect(try call("/updatedevice",
            ["userid": user.userID, "token": try user.seal(["oldApnsToken": token, "apnsToken": moved])]).responseCode == "UpdateSuccess")

        // The last device leaves: the record goes with it.
        #expect(try call("/unregister", ["userid": user.userID, "token": try user.seal(moved)]).responseCode == "DeviceUnregistered")
        #expect(try SubscriptionStore(database: database, vault: context.services.vault).record(userID: user.userID) == nil)
    }

    @Test func aDatabaseLostMidRequestIs503AndTheNextRequestIsServed() throws {
        let user = try newUser()
        let flaky = FlakyDatabase(database)
        let context = Self.context(flaky, registrar, configuration)
        flaky.failAfter(1)
        let lost = try call("/registerdevicev2", ["userid": user.userID, "email": user.email, "bundleid": "b",
                                                  "creds": try user.seal(["apnsToken": Self.token(), "oauthAccessToken": "t"])], context: context)
        #expect(lost.status == 503 && lost.responseCode == "ServiceUnavailable")
        flaky.heal()
        #expect(try call("/getpublickey", ["userid": user.userID], context: context).responseCode == "UserRecordPresentNotSubscribed")
    }
}
