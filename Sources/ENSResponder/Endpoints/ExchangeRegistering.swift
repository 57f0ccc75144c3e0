public import ENSCore

/// What /registerdevicev2 needs from Exchange. Both operations first prove that the
/// sealed credentials open the named mailbox at its Exchange; neither changes anything
/// a user can notice unless that proof holds (docs/security.md, "Proof of possession").
public protocol ExchangeRegistering: Sendable {
    /// Finds the EWS URL, proves the credentials there, and subscribes the Inbox with a
    /// sealed callback URL; the record's live subscription (if any) stays live until
    /// the new one is recorded, and is replaced only by the mailbox's own Exchange.
    func subscribe(_ request: ExchangeSubscriptionRequest, context: RequestContext) throws -> ExchangeOutcome
    /// Proves the credentials against the record's live subscription's EWS URL without
    /// subscribing: how a device joins an already subscribed record.
    func proveAccess(_ request: ExchangeSubscriptionRequest, context: RequestContext) throws -> ExchangeOutcome
}

public struct ExchangeSubscriptionRequest: Sendable {
    public let record: UserRecord
    /// The mailbox's SMTP address, whose hash is the record's userid: Autodiscover's
    /// input and the mailbox the proof of possession opens.
    public let mailbox: String
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
    /// The credentials open the mailbox at the live subscription's Exchange.
    case proven
    case autodiscoverFailed
    case authenticationFailed
    /// A forced registration named an EWS endpoint that is neither the live
    /// subscription's Exchange, nor what Autodiscover finds for the address, nor on the
    /// operator's list.
    case endpointNotTrusted
    /// Too many failed proofs for this record lately; Exchange was not contacted.
    case throttled
    /// Every registration place of this responder process is taken (slow Exchange
    /// servers): try again shortly; Exchange was not contacted.
    case busy
    case failed
}
