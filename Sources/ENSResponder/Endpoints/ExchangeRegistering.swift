public import ENSCore

/// What /registerdevicev2 needs from Exchange: autodiscover the EWS URL, subscribe to
/// Inbox push notifications with a sealed callback URL, and store the subscription.
public protocol ExchangeRegistering: Sendable {
    func subscribe(_ request: ExchangeSubscriptionRequest, context: RequestContext) throws -> ExchangeOutcome
}

public struct ExchangeSubscriptionRequest: Sendable {
    public let record: UserRecord
    public let email: String?
    public let credentials: ExchangeCredentials
    public let exchangeVersion: Int?
}

/// The credentials in `creds`, alive only for the duration of one request.
public struct ExchangeCredentials: Sendable {
    public enum Method: Sendable {
        case basic(userName: String, password: String)
        case oauth(accessToken: String)
        case certificate(pkcs12: [UInt8], password: String)
    }

    public let method: Method
    public let ewsURL: String?
}

public enum ExchangeOutcome: Sendable, Equatable {
    case subscribed
    case autodiscoverFailed
    case authenticationFailed
    case failed
}
