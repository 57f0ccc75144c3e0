public import Curl
public import ENSModel
public import SenderWire

/// One HTTP/2 request to a push service, as a provider builds it for a notification.
public struct PushRequest: Sendable {
    public let url: String
    public let headers: [(String, String)]
    public let body: [UInt8]
    /// A TLS client certificate when the provider authenticates the connection rather
    /// than the request (APNs certificate auth); connections are kept per certificate.
    public let clientCertificate: ClientCertificate?

    public init(url: String, headers: [(String, String)], body: [UInt8], clientCertificate: ClientCertificate? = nil) {
        self.url = url
        self.headers = headers
        self.body = body
        self.clientCertificate = clientCertificate
    }
}

/// A push service's answer to one request: its HTTP status (nil when no HTTP answer
/// came: refused, reset, timed out) and body.
public struct PushAnswer: Sendable {
    public let status: Int?
    public let body: [UInt8]
    /// The answer's Retry-After, in seconds (the HTTP-date form is not used by push
    /// services and is ignored).
    public let retryAfter: Duration?

    public init(status: Int?, body: [UInt8], retryAfter: Duration? = nil) {
        self.status = status
        self.body = body
        self.retryAfter = retryAfter
    }

    /// Retry-After (seconds or an HTTP-date), at most a day; nil when absent or unreadable.
    public static func retryAfter(_ header: String?, now: Timestamp = .now()) -> Duration? {
        RetryAfter.parse(header, now: now, maximum: .seconds(86_400))
    }
}

/// What a provider makes of an answer: the shared delivery machinery acts on `action`;
/// `reason` is the provider's own short word for it (a metric label and a log field,
/// from a bounded vocabulary).
public struct PushVerdict: Sendable, Equatable {
    public let action: DeliveryAction
    public let reason: String
    /// For a retry: not sooner than this (the provider's Retry-After).
    public let retryAfter: Duration?

    public init(action: DeliveryAction, reason: String, retryAfter: Duration? = nil) {
        self.action = action
        self.reason = reason
        self.retryAfter = retryAfter
    }
}

/// Why a provider cannot build a request for a notification: retrying cannot help,
/// except for `temporarilyUnavailable`.
public enum PushRequestError: Error, Sendable, CustomStringConvertible {
    /// No credentials are configured for the notification's app (topic).
    case noCredentials(topic: String)
    /// The credentials exist but could not be turned into a request (e.g. a signing
    /// failure); the provider's own words, never a secret.
    case credentials(String)
    /// The credentials cannot be had right now (an OAuth token endpoint down or
    /// refusing): the notification waits and is tried again, backed off.
    case temporarilyUnavailable(String)

    public var description: String {
        switch self {
        case .noCredentials(let topic): "no credentials for \(topic)"
        case .credentials(let problem): problem
        case .temporarilyUnavailable(let problem): problem
        }
    }
}

/// A push service ENS delivers to: everything that differs between APNs and the next
/// provider (FCM) lives behind this protocol. The spool, the socket intake, the HTTP/2
/// multiplexer, the retry schedule and the device feedback are shared and do not know
/// which provider runs.
///
/// A provider is used only by the sender's delivery thread.
public protocol PushProvider: AnyObject {
    /// Which device tokens this provider delivers to.
    var kind: DeviceToken.Provider { get }
    /// The provider's endpoint for an environment (scheme, host and port).
    func baseURL(for environment: PushNotification.Environment) -> String
    /// How many distinct credentials may each want their own connections.
    var credentialCount: Int { get }
    /// The HTTP/2 request that delivers `notification`.
    func request(for notification: PushNotification) throws(PushRequestError) -> PushRequest
    /// What to do with the answer to that request.
    func verdict(for answer: PushAnswer) -> PushVerdict
    /// The provider said our credentials expired: get fresh ones before the retry.
    func refreshCredentials() throws
}
