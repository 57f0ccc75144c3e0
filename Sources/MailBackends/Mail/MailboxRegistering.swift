public import ENSHTTP
internal import ENSConfig
public import ENSModel
public import ENSStore
internal import Logging

/// What /registerdevicev2 needs from a mail backend (EWS: `ExchangeRegistrar`). Both
/// operations first prove that the sealed credentials open the named mailbox at its
/// server; neither changes anything a user can notice unless that proof holds
/// (docs/security.md, "Proof of possession").
public protocol MailboxRegistering: Sendable {
    var backend: MailBackend { get }
    /// Whether this backend is the one for a new subscription of this mailbox. Asked in
    /// order (`MailRegistrars.preferred`), inside a registration place (it may look the
    /// mailbox's domain up); the fallback backend is never asked.
    func serves(_ request: MailboxRequest, context: RequestContext) throws -> Bool
    /// Finds where the mailbox lives (EWS: Autodiscover), proves the credentials there,
    /// and subscribes to new mail in its Inbox; the record's live subscription (if any)
    /// stays live until the new one is recorded, and is replaced only by the mailbox's
    /// own server.
    func subscribe(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome
    /// Proves the credentials against the record's live subscription without
    /// subscribing: how a device joins an already subscribed record. The credentials go
    /// only to the server the device names itself or that discovery finds for its own
    /// address; when that is not the live subscription's server, the device subscribes
    /// there instead (`subscribe`'s rules), and never proves itself at the stored one.
    func proveAccess(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome
    /// Leaves new credentials for the record's live subscription, for its next callback
    /// to take (a check-in's `creds`), once they opened `request.mailbox` at the live
    /// subscription's own server (the same proof, throttle and registration places as a
    /// registration's): `.proven` when they were left, `.failed` when the subscription
    /// cannot take them (it keeps none, as Graph's, is not live, or is not at
    /// `endpoint`, the server the offering device is bound to). The offering device
    /// (`request.presenter`) supplied them: they go when it leaves the record.
    func offerCredentials(_ request: MailboxRequest, endpoint: String, context: RequestContext) throws -> MailboxOutcome
}

extension MailboxRegistering {
    public func offerCredentials(_ request: MailboxRequest, endpoint: String, context: RequestContext) throws -> MailboxOutcome {
        .failed
    }
}

extension RequestContext {
    /// Runs a registration's work with a backend in one of this process's registration
    /// places (exchange.max_concurrent_registrations); none free: `.busy`, at once, so a
    /// slow mail server never holds every responder thread.
    func inRegistrationPlace(_ body: () throws -> MailboxOutcome) throws -> MailboxOutcome {
        try withRegistrationPlace(body) ?? .busy
    }

    /// `body`'s result in one of this process's registration places; nil (logged) when
    /// they are all taken.
    func withRegistrationPlace<Result>(_ body: () throws -> Result) throws -> Result? {
        guard let result = try services.registrationGate.ifAvailable(body) else {
            logger.warning("registration refused: this process's registration places are all taken")
            return nil
        }
        return result
    }
}

/// One registration's mailbox, as the device API hands it to a backend.
public struct MailboxRequest: Sendable {
    public let record: UserRecord
    /// The mailbox's SMTP address, whose hash is the record's userid: what discovery
    /// starts from and the mailbox the proof of possession opens.
    public let mailbox: String
    public let credentials: MailCredentials
    /// The client's hint of the server's protocol version (`exchVersion`), if any.
    public let protocolVersion: Int?
    /// The registering device and the client's address: what failed proofs are counted
    /// against (`ProofThrottle`).
    public let presenter: ProofPresenter

    public init(record: UserRecord, mailbox: String, credentials: MailCredentials, protocolVersion: Int?, presenter: ProofPresenter) {
        self.record = record
        self.mailbox = mailbox
        self.credentials = credentials
        self.protocolVersion = protocolVersion
        self.presenter = presenter
    }

    /// Whether the throttle lets this proof be tried now; a refusal is logged (by
    /// record, never device or address) and answered without contacting the server.
    func proofAllowed(context: RequestContext) throws -> Bool {
        // From the context, not a registrar's copy: a reload may have changed the limit.
        let limits = context.settings.exchange
        let verdict = try ProofThrottle(database: context.database, vault: context.services.vault)
            .verdict(recordID: record.id, presenter: presenter, limit: limits.proofFailureLimit, window: limits.proofWindow, now: .now())
        guard verdict == .allowed else {
            context.logger.warning("registration throttled: too many failed proofs", metadata: [
                "record": "\(record.id)", "held": verdict == .deviceHeld ? "device" : verdict == .identityHeld ? "account" : "address",
            ])
            return false
        }
        return true
    }

    /// A failed proof: Exchange (or Graph) refused the credentials for this mailbox.
    func recordProofFailure(context: RequestContext) throws {
        try ProofThrottle(database: context.database, vault: context.services.vault)
            .recordFailure(recordID: record.id, presenter: presenter, window: context.settings.exchange.proofWindow, now: .now())
    }

    /// A proof that held: the device's earlier failures no longer count.
    func recordProofSuccess(context: RequestContext) throws {
        try ProofThrottle(database: context.database, vault: context.services.vault).recordSuccess(recordID: record.id, presenter: presenter)
    }
}

/// The credentials in `creds`, alive only for the duration of one request.
public struct MailCredentials: Sendable {
    public enum Method: Sendable {
        case basic(userName: String, password: String)
        case oauth(accessToken: String)
        case certificate(pkcs12: [UInt8], password: String)
        /// A delegated Microsoft Graph access token (`graphAccessToken`): read once to
        /// learn whose mailbox it is, then forgotten (docs/graph.md).
        case graph(accessToken: String)
    }

    public let method: Method
    /// A server the client names itself (`ewsUrl`), instead of discovery.
    public let serverURL: String?
    /// With `.oauth`: the device's refresh token, token endpoint and client id
    /// (`oauthRefresh`), for renewing the access token at callbacks.
    public let oauthRefresh: OAuthRefresh?

    public init(method: Method, serverURL: String?, oauthRefresh: OAuthRefresh? = nil) {
        self.method = method
        self.serverURL = serverURL
        self.oauthRefresh = oauthRefresh
    }

    /// The account a password logs in as (Basic): what a directory locks after too many
    /// wrong passwords. Nil for tokens and certificates, which lock nothing.
    public var userName: String? {
        if case .basic(let userName, _) = method { return userName }
        return nil
    }
}

/// What registering with the mail backend came to; the device API answers each with
/// one of the contract's codes.
public enum MailboxOutcome: Sendable, Equatable {
    /// Subscribed at `endpoint` (`URLParts.origin`, or Graph's tenant): the server the
    /// device is bound to.
    case subscribed(endpoint: String)
    /// The credentials open the mailbox at the live subscription's server, `endpoint`.
    case proven(endpoint: String)
    /// Where the mailbox lives could not be found.
    case autodiscoverFailed
    case authenticationFailed
    /// A registration named a server that is neither the live subscription's nor what
    /// discovery finds for the address nor on the operator's list, while the live one
    /// is confirmed (discovery's cached answer, or the list).
    case endpointNotTrusted
    /// The credentials open the mailbox at `endpoint`, the server the device named,
    /// which is not the live subscription's, and neither is confirmed (by discovery for
    /// the address, or the operator's list): the device gets a claim, a subscription of
    /// its own there beside the record (`SubscriptionStore.claim(of:endpoint:)`).
    case ownServer(endpoint: String)
    /// Too many failed proofs lately from this device or this client address for the
    /// record; the server was not contacted.
    /// Registrations may be tried again after `retryAfter`.
    case throttled(retryAfter: Duration)
    /// Every registration place of this responder process is taken (slow servers):
    /// try again shortly; the server was not contacted.
    case busy
    case failed
}

/// The mail backends this process registers mailboxes with.
public struct MailRegistrars: Sendable {
    /// Asked in order whether they serve a new subscription of a mailbox.
    public let preferred: [any MailboxRegistering]
    /// Takes every new subscription the preferred ones do not.
    public let fallback: any MailboxRegistering

    public init(fallback: any MailboxRegistering, preferring preferred: [any MailboxRegistering] = []) {
        self.fallback = fallback
        self.preferred = preferred
    }

    /// The backend of a record's live subscription: the one a joining device proves
    /// itself at. Nil for a backend this build or configuration does not have.
    public func registrar(of backend: MailBackend) -> (any MailboxRegistering)? {
        (preferred + [fallback]).first { $0.backend == backend }
    }

    /// The backend a new subscription of the mailbox goes to; nil when this process's
    /// registration places are all taken. Asking may mean discovery (Dovecot's: DNS,
    /// then HTTPS to a domain the caller named, seconds of a thread), so it happens
    /// inside a place, as the rest of a registration's outbound work does, and a flood
    /// of registrations for made-up domains cannot hold every responder thread.
    public func registrar(serving request: MailboxRequest, context: RequestContext) throws -> (any MailboxRegistering)? {
        try context.withRegistrationPlace { () throws -> any MailboxRegistering in
            for registrar in preferred where try registrar.serves(request, context: context) {
                return registrar
            }
            return fallback
        }
    }
}
