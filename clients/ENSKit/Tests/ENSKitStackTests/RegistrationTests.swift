import ENSKitCurl
import Foundation
import Testing
@testable import ENSKit

/// ENSKit against the real stack: registration with each kind of credential, check-in
/// states, token update, unregistering, and answers ENS never sends.
@Suite(.serialized, .enabled(if: Stack.isUp, "needs the stack scripts/enskit-test.sh starts"))
struct RegistrationTests {
    @Test func passwordRegistrationAndAPreviewPush() async throws {
        let (user, credentials) = try await Stack.passwordMailbox()
        let client = try Stack.client()
        let token = try Stack.apnsToken()
        let key = try await client.getPublicKey(for: user)
        #expect(key.userID == user.userID && !key.isSubscribed)
        // ENS named envelopes in the key's answer (through nginx): every value below,
        // the registration's creds included, is sealed as one.
        #expect(try await client.pinnedSealer(for: user).form == .envelope)
        let result = try await client.register(ENSRegistration(user: user, token: token, credentials: credentials,
                                                               exchangeVersion: 3, defaultSound: "default"))
        #expect(result.outcome == .subscribed && result.pushTag?.count == 16 && result.privacy == nil)
        try await client.updateSyncKey(user: user, token: token, key: "kek-stack", expiration: Date().addingTimeInterval(86_400))

        try await Stack.newMail(user, subject: "Lunch on Friday?", from: "Ann Example")
        #expect(await Stack.eventually { !Stack.apnsPayloads(to: token).isEmpty })
        let push = try ENSPush(userInfo: try #require(Stack.apnsPayloads(to: token).last))
        #expect(push.mode == .preview && push.userID == user.userID && push.kind == .newMail)
        let content = try #require(push.previewContent)
        #expect(content.sender == "Ann Example" && content.subject == "Lunch on Friday?" && content.syncKey?.key == "kek-stack")
        #expect(await push.content(using: client) == content)
        // The push's own time: nothing was missed.
        let checkIn = try await client.checkIn(user: user, token: token, lastNotificationTimestamp: push.timestamp)
        #expect(checkIn.action == .nothing)
        // A device that says it got nothing since before that push missed it.
        let missed = try await client.checkIn(user: user, token: token, lastNotificationTimestamp: try #require(push.timestamp) - 60_000)
        #expect(missed.action == .registerAgain(.notSubscribed))
    }

    @Test func oauthWithARefreshGrantRegisters() async throws {
        try await Stack.control(Stack.exchange, "/domains", ["domain": "pox.test", "mode": "pox-root"])
        let email = Stack.unique("o") + "@pox.test"
        let clientID = Stack.unique("enskit-")
        try await Stack.control(Stack.exchange, "/oauth/clients", ["clientId": clientID, "rotate": true, "accessLifetime": 3600])
        try await Stack.control(Stack.exchange, "/mailboxes", ["email": email])
        let grant = try await Stack.control(Stack.exchange, "/oauth/grants", ["email": email, "clientId": clientID])
        let refresh = ENSOAuthRefresh(refreshToken: try #require(grant["refreshToken"] as? String),
                                      tokenEndpoint: try #require(URL(string: "https://login.pox.test/common/oauth2/v2.0/token")), clientID: clientID)
        let credentials = ENSCredentials.oauth(accessToken: try #require(grant["accessToken"] as? String), refresh: refresh)
        let result = try await Stack.client().register(ENSRegistration(user: ENSUser(email: email),
                                                                       token: try Stack.apnsToken(), credentials: credentials))
        #expect(result.outcome == .subscribed)
    }

    @Test func certificateRegistersAndAWrongPasswordIsRefused() async throws {
        try await Stack.control(Stack.exchange, "/domains", ["domain": "pox.test", "mode": "pox-root"])
        let email = Stack.unique("c") + "@pox.test"
        let issued = try await Stack.control(Stack.exchange, "/mailboxes", ["email": email, "certificate": "rsa2048"])
        let bundle = try #require(issued["pkcs12"] as? String)
        let pkcs12 = try #require(Data(base64Encoded: bundle))
        let password = try #require(issued["pkcs12Password"] as? String)
        let client = try Stack.client()
        let user = ENSUser(email: email)
        let token = try Stack.apnsToken()
        let result = try await client.register(ENSRegistration(user: user, token: token,
                                                               credentials: .certificate(pkcs12: pkcs12, password: password)))
        #expect(result.outcome == .subscribed)
        await #expect(throws: ENSError.self) {
            try await client.register(ENSRegistration(user: user, token: token,
                                                      credentials: .certificate(pkcs12: pkcs12, password: "not-it"), force: true))
        }
    }

    @Test func graphDelegatedTokenRegistersAndMailArrives() async throws {
        let email = Stack.unique("g") + "@contoso.test"
        try await Stack.control(Stack.graph, "/users", ["tenant": "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001", "mail": email, "displayName": "Graph User"])
        let issued = try await Stack.control(Stack.graph, "/user-token", ["mail": email, "lifetimeSeconds": 3600])
        let access = try #require(issued["access_token"] as? String)
        let client = try Stack.client()
        let token = try Stack.apnsToken()
        let user = ENSUser(email: email)
        let result = try await client.register(ENSRegistration(user: user, token: token, credentials: .graph(accessToken: access)))
        #expect(result.outcome == .subscribed)
        try await Stack.control(Stack.graph, "/newmail", ["mail": email, "subject": "Quarterly numbers", "fromName": "Bea Finance",
                                                          "fromAddress": "bea@contoso.test", "wait": true])
        #expect(await Stack.eventually { !Stack.apnsPayloads(to: token).isEmpty })
        let push = try ENSPush(userInfo: try #require(Stack.apnsPayloads(to: token).last))
        #expect(push.previewContent?.subject == "Quarterly numbers" && push.previewContent?.sender == "Bea Finance")
        // Graph subscriptions keep no device credentials: a check-in's are unused.
        let checkIn = try await client.checkIn(user: user, token: token, credentials: .graph(accessToken: access))
        #expect(checkIn == ENSCheckInResult(action: .registerAgain(.credentialsUnused), credentials: .unused))
    }

    /// Check-in answers: healthy; a new token from the OS (update it); the token
    /// rejected by APNs (register again, which re-enables it); unregistered (not found).
    @Test func checkInStatesAndTheTokenUpdate() async throws {
        let (user, credentials) = try await Stack.passwordMailbox()
        let client = try Stack.client()
        let first = try Stack.apnsToken()
        _ = try await client.register(ENSRegistration(user: user, token: first, credentials: credentials))
        #expect(try await client.checkIn(user: user, token: first).action == .nothing)
        #expect(try await client.checkInV1(user: user).action == .nothing)

        let second = try Stack.apnsToken()
        #expect(try await client.checkIn(user: user, token: second).action == .updateToken(registered: first))
        try await client.updateDevice(user: user, from: first, to: second)
        #expect(try await client.checkIn(user: user, token: second).action == .nothing)
        // The old token is gone.
        await #expect(throws: ENSError.updateFailed) { try await client.updateDevice(user: user, from: first, to: second) }

        try await Stack.control(Stack.apns, "/fail", ["token": second.value, "status": 410, "reason": "Unregistered", "count": 0])
        try await Stack.newMail(user, subject: "Into the void", from: "Ann Example")
        #expect(try await Stack.eventually { try await client.checkIn(user: user, token: second).action == .registerAgain(.notSubscribed) })
        try await Stack.control(Stack.apns, "/reset", [:])
        _ = try await client.register(ENSRegistration(user: user, token: second, credentials: credentials))
        #expect(try await client.checkIn(user: user, token: second).action == .nothing)

        try await client.unregister(user: user, token: second)
        // The last device left: the record, and the key ENSKit pinned, are gone.
        #expect(try await client.checkIn(user: user, token: second).action == .registerAgain(.notFound))
        let again = try await client.register(ENSRegistration(user: user, token: second, credentials: credentials))
        #expect(again.outcome == .subscribed)
    }

    /// A key ENS does not have, pinned for the user: ENS refuses what was sealed under
    /// it (400), ENSKit fetches the user's key again and the call succeeds.
    @Test func aStalePinnedKeyIsReplaced() async throws {
        let (user, credentials) = try await Stack.passwordMailbox()
        let store = MemoryKeyStore()
        let client = try Stack.client(keyStore: store)
        let token = try Stack.apnsToken()
        _ = try await client.register(ENSRegistration(user: user, token: token, credentials: credentials))
        let stranger = try ENSBlindKey().publicKeyPEM
        try store.set(Data(stranger.utf8), for: .serverKey(client.configuration.namespace, user.userID))
        try await client.updateSyncKey(user: user, token: token, key: "kek", expiration: Date().addingTimeInterval(3600))
        #expect(try store.data(for: .serverKey(client.configuration.namespace, user.userID)) != Data(stranger.utf8))
    }

    @Test func answersENSNeverSendsAreRefusedCleanly() async throws {
        let user = ENSUser(email: Stack.unique("x") + "@pox.test")
        // The Exchange simulator's control port answers JSON that is not ENS's.
        let impostor = try Stack.client(baseURL: "http://127.0.0.1:\(Stack.port + Stack.exchange)")
        await #expect {
            try await impostor.getPublicKey(for: user)
        } throws: { error in
            (error as? ENSError)?.code == .unexpectedAnswer
        }
        await #expect(throws: ENSError.unauthorized) {
            try await Stack.client(apiToken: "ens_" + String(repeating: "0", count: 64)).getPublicKey(for: user)
        }
        #expect(await try Stack.client().alive())
        #expect(await !impostor.alive())
    }
}
