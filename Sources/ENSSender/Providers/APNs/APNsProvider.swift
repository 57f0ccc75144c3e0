internal import Curl
public import ENSModel
public import SenderWire
public import OpenSSL

/// How ens-sender authenticates to APNs, per topic (bundle id): a client certificate if
/// one is configured for the topic, else the shared provider token (JWT); a topic with
/// neither cannot be delivered.
public struct APNsCredentials: Sendable {
    public let token: ProviderToken?
    public let certificates: [String: ClientIdentity]

    public init(token: ProviderToken?, certificates: [String: ClientIdentity]) {
        self.token = token
        self.certificates = certificates
    }
}

/// Apple Push Notification service: the first `PushProvider`. Requests are Apple's
/// `POST /3/device/<token>` with the `apns-*` headers; answers are read by Apple's
/// "Handling notification responses" table (`action(status:reason:timestamp:)`).
public final class APNsProvider: PushProvider {
    public let kind = DeviceToken.Provider.apns
    private let credentials: APNsCredentials
    /// The certificates in the PEM form libcurl takes, made once.
    private let certificateBlobs: [String: ClientCertificate]
    private let productionURL: String
    private let sandboxURL: String

    public init(credentials: APNsCredentials, productionURL: String, sandboxURL: String) {
        self.credentials = credentials
        certificateBlobs = credentials.certificates.mapValues {
            ClientCertificate(certificatePEM: $0.certificatePEM, privateKeyPEM: $0.privateKeyPEM)
        }
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
    }

    public func baseURL(for environment: PushNotification.Environment) -> String {
        environment == .production ? productionURL : sandboxURL
    }

    /// Each credential (the token, each certificate) gets its own connections.
    public var credentialCount: Int { certificateBlobs.count + (credentials.token == nil ? 0 : 1) }

    public func request(for notification: PushNotification) throws(PushRequestError) -> PushRequest {
        let certificate = certificateBlobs[notification.topic]
        var headers: [(String, String)] = []
        if certificate == nil {
            // Token auth; a certificate authenticates the connection instead.
            guard let token = credentials.token else { throw .noCredentials(topic: notification.topic) }
            do {
                headers.append(("authorization", "bearer " + (try token.token())))
            } catch {
                throw .credentials("cannot mint a provider token: \(error)")
            }
        }
        headers += [
            ("apns-topic", notification.topic),
            ("apns-push-type", notification.pushType.rawValue),
            ("apns-priority", String(notification.priority)),
            ("apns-expiration", String(notification.expiration)),
            ("apns-collapse-id", notification.id),
            ("content-type", "application/json"),
        ]
        return PushRequest(url: baseURL(for: notification.environment) + "/3/device/" + notification.deviceToken.value,
                           headers: headers, body: notification.payload, clientCertificate: certificate)
    }

    public func verdict(for answer: PushAnswer) -> PushVerdict {
        var reason: String?
        var timestamp: Int64?
        if answer.status != nil, let body = try? JSONParser.parse(answer.body) {
            reason = body["reason"]?.stringValue
            if case .number(let text)? = body["timestamp"] { timestamp = Int64(text) }
        }
        return PushVerdict(action: Self.action(status: answer.status, reason: reason, timestamp: timestamp), reason: Self.reasonLabel(reason))
    }

    public func refreshCredentials() throws {
        try credentials.token?.expired()
    }

    /// What to do with an APNs answer, as a pure function. `status` is nil when the
    /// request got no HTTP answer (connection refused or lost).
    public static func action(status: Int?, reason: String?, timestamp: Int64?) -> DeliveryAction {
        guard let status else { return .retry }
        switch (status, reason ?? "") {
        case (200, _): return .delivered
        case (410, _): return .disableToken(timestamp: timestamp)
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"): return .disableToken(timestamp: nil)
        case (403, "ExpiredProviderToken"): return .refreshCredentialsAndRetry
        case (403, "InvalidProviderToken"), (403, "MissingProviderToken"), (403, "BadCertificate"),
             (403, "BadCertificateEnvironment"), (403, "Forbidden"), (400, "TopicDisallowed"):
            // The key, team, certificate or its app is wrong: an operator must fix it.
            return .credentialRefused(reason: "\(status) \(reason ?? "")")
        case (400, "IdleTimeout"): return .retry
        case (429, _), (500...599, _): return .retry
        default: return .drop(reason: "\(status) \(reason ?? "")")
        }
    }

    /// Apple's reason strings are a short fixed vocabulary; anything else (a broken
    /// answer) is folded into "other" so a label cannot grow without bound.
    static func reasonLabel(_ reason: String?) -> String {
        guard let reason, !reason.isEmpty else { return "" }
        guard reason.utf8.count <= 40, reason.utf8.allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }) else { return "other" }
        return reason
    }
}
