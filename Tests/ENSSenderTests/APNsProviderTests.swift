import ENSTestSupport
import Testing
@testable import ENSModel
@testable import SenderWire
@testable import ENSSender
import OpenSSL

/// The APNs implementation of the push-provider seam: the request Apple documents for a
/// notification, and Apple's answers read into delivery actions and bounded labels.
@Suite struct APNsProviderTests {
    static func notification(topic: String = "com.example.mail", environment: PushNotification.Environment = .production) throws -> PushNotification {
        PushNotification(
            id: "0123456789abcdef0123456789abcdef", deviceToken: try #require(DeviceToken(hex: "A1B2C3D4E5F60718293A4B5C6D7E8F90")),
            topic: topic, environment: environment, pushType: .alert, expiration: 1_900_000_000,
            payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), deviceRowID: 7)
    }

    static func provider(token: Bool = true) throws -> APNsProvider {
        let key = try ECSigningKey.generate()
        let credentials = APNsCredentials(token: token ? ProviderToken(key: key, keyID: "ABCDE12345", teamID: "TEAM123456") : nil, certificates: [:])
        return APNsProvider(credentials: credentials, productionURL: "https://prod.example", sandboxURL: "https://sandbox.example")
    }

    @Test func buildsApplesRequest() throws {
        let provider = try Self.provider()
        #expect(provider.kind == .apns)
        #expect(provider.credentialCount == 1)
        let request = try provider.request(for: try Self.notification())
        #expect(request.url == "https://prod.example/3/device/a1b2c3d4e5f60718293a4b5c6d7e8f90")
        let headers = Dictionary(uniqueKeysWithValues: request.headers)
        #expect(headers["apns-topic"] == "com.example.mail")
        #expect(headers["apns-push-type"] == "alert")
        #expect(headers["apns-priority"] == "10")
        #expect(headers["apns-expiration"] == "1900000000")
        #expect(headers["apns-collapse-id"] == "0123456789abcdef0123456789abcdef")
        #expect(headers["authorization"]?.hasPrefix("bearer ey") == true)
        #expect(request.body == Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        #expect(request.clientCertificate == nil)
        let sandbox = try provider.request(for: try Self.notification(environment: .sandbox))
        #expect(sandbox.url.hasPrefix("https://sandbox.example/3/device/"))
    }

    @Test func aTopicWithoutCredentialsCannotBeSent() throws {
        let provider = try Self.provider(token: false)
        #expect(provider.credentialCount == 0)
        #expect(throws: PushRequestError.self) { try provider.request(for: try Self.notification()) }
    }

    @Test func answersBecomeActionsAndBoundedLabels() throws {
        let provider = try Self.provider()
        func verdict(_ status: Int?, _ body: String) -> PushVerdict { provider.verdict(for: PushAnswer(status: status, body: Array(body.utf8))) }
        #expect(verdict(200, "") == PushVerdict(action: .delivered, reason: ""))
        #expect(verdict(410, #"{"reason":"Unregistered","timestamp":1700000000123}"#)
            == PushVerdict(action: .disableToken(timestamp: 1_700_000_000_123), reason: "Unregistered"))
        #expect(verdict(403, #"{"reason":"ExpiredProviderToken"}"#) == PushVerdict(action: .refreshCredentialsAndRetry,
                                                                                   reason: "ExpiredProviderToken"))
        // A credential an operator must fix: its notifications wait, never dropped.
        for (status, reason) in [(403, "InvalidProviderToken"), (403, "MissingProviderToken"), (403, "BadCertificate"),
                                 (403, "BadCertificateEnvironment"), (403, "Forbidden"), (400, "TopicDisallowed")] {
            #expect(verdict(status, #"{"reason":"\#(reason)"}"#).action == .credentialRefused(reason: "\(status) \(reason)"))
        }
        #expect(verdict(400, #"{"reason":"BadTopic"}"#).action == .drop(reason: "400 BadTopic"))
        #expect(verdict(nil, "") == PushVerdict(action: .retry, reason: ""))
        #expect(verdict(503, "not json") == PushVerdict(action: .retry, reason: ""))
        // A hostile or broken answer cannot mint new metric labels.
        #expect(verdict(400, #"{"reason":"<script>"}"#).reason == "other")
        #expect(verdict(400, #"{"reason":"\#(String(repeating: "A", count: 41))"}"#).reason == "other")
    }
}
