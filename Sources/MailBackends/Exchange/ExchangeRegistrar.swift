public import ENSHTTP
internal import Curl
public import ENSConfig
public import ENSModel
internal import ENSStore
internal import ENSVault
internal import EWS
internal import Logging
internal import OpenSSL
internal import POSIX

/// /registerdevicev2's Exchange work: find the EWS URL (given, cached, or by
/// Autodiscover), prove that the credentials open the named mailbox there, store the
/// credentials sealed under the master key and a key only the new callback URL carries,
/// subscribe the Inbox to push notifications, and record the subscription.
///
/// Nothing a user can notice changes before Exchange has said yes: an attempt works
/// under a pending generation, and the record's live subscription keeps delivering
/// until the new one is recorded (MailSubscriptionStore.beginRegistration).
public struct ExchangeRegistrar: MailboxRegistering {
    /// Exchange refuses callback URLs of 2,083 characters or more
    /// (ErrorInvalidPushSubscriptionUrl).
    static let maximumCallbackURLLength = 2082

    public let backend = MailBackend.ews
    let settings: ExchangeSettings

    public init(settings: ExchangeSettings) {
        self.settings = settings
    }

    /// EWS is the fallback backend: it is never asked, and serves any mailbox.
    public func serves(_ request: MailboxRequest, context: RequestContext) throws -> Bool { true }

    /// Whether two EWS URLs name the same Exchange server (scheme, host and port).
    static func sameServer(_ one: String, _ other: String) -> Bool {
        guard let one = URLParts(one), let other = URLParts(other) else { return false }
        return one.sameServer(as: other)
    }

    public func proveAccess(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        try withinLimits(context) { client throws in try proveAccess(request, client: client, context: context) }
    }

    public func subscribe(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        try withinLimits(context) { client throws in try subscribe(request, client: client, context: context) }
    }

    /// A registration's Exchange work holds one of this process's registration places
    /// (none free: `.busy`, at once) and runs within one budget, every Autodiscover hop,
    /// the proof and the Subscribe attempts together.
    private func withinLimits(_ context: RequestContext, _ body: (EWSClient) throws -> MailboxOutcome) throws -> MailboxOutcome {
        let client = try context.ewsClient()
        return try context.inRegistrationPlace {
            try client.withDeadline(settings.registrationBudget) { () throws -> MailboxOutcome in
                try body(client)
            }
        }
    }

    /// A device joining a subscribed record. Its credentials go only where the device
    /// itself says its mailbox is (`ewsUrl`, else Autodiscover for its own address),
    /// never to the URL the record holds: whoever subscribed the record first may have
    /// named a server of their own. At the live subscription's server, the device
    /// proves itself and joins; anywhere else it subscribes there, which replaces the
    /// live subscription only by the mailbox's own Exchange (`subscribe`).
    private func proveAccess(_ request: MailboxRequest, client: EWSClient, context: RequestContext) throws -> MailboxOutcome {
        let attempt = Attempt(request: request, context: context, settings: settings)
        guard let state = try attempt.store.subscriptionState(recordID: request.record.id), state.isLive, state.backend == .ews,
              let liveURL = state.backendURL, let liveEndpoint = state.endpoint else {
            // No live subscription to prove against (it ended meanwhile): subscribe,
            // which proves the credentials on its way.
            return try subscribe(request, client: client, context: context)
        }
        guard try request.proofAllowed(context: context) else { return .throttled(retryAfter: context.settings.exchange.proofWindow) }
        guard let credentials = try attempt.credentials() else { return .authenticationFailed }
        let own: Endpoint
        switch try attempt.ownEndpoint(credentials: credentials, client: client, now: .now()) {
        case .found(let endpoint): own = endpoint
        case .refused(let outcome): return outcome
        }
        guard Self.sameServer(own.url, liveURL) else {
            context.logger.info("joining device's Exchange is not the live subscription's: subscribing there instead",
                                metadata: ["record": "\(request.record.id)"])
            return try subscribe(at: own, credentials: credentials, state: state, attempt: attempt, client: client, context: context)
        }
        let version = state.backendVersion.flatMap(EWSVersion.init(rawValue:)) ?? .default
        switch try attempt.prove(ewsURL: own.url, credentials: credentials, version: version) {
        case .proven:
            // Proven just now: the subscription's next callback takes them.
            _ = try offer(credentials, record: request.record, endpoint: liveEndpoint, device: request.presenter.tokenHash, context: context)
            return .proven(endpoint: liveEndpoint)
        case .refused(let outcome):
            return outcome
        }
    }

    public func offerCredentials(_ request: MailboxRequest, endpoint: String, context: RequestContext) throws -> MailboxOutcome {
        try withinLimits(context) { client throws in
            let attempt = Attempt(request: request, context: context, settings: settings)
            // The live subscription's server, from its authenticated row: where the
            // offering device proved itself when it registered.
            guard let state = try attempt.store.subscriptionState(recordID: request.record.id), state.isLive, state.backend == .ews,
                  let liveURL = state.backendURL, state.endpoint == endpoint else { return .failed }
            guard try request.proofAllowed(context: context) else { return .throttled(retryAfter: context.settings.exchange.proofWindow) }
            guard let credentials = try attempt.credentials() else { return .authenticationFailed }
            let version = state.backendVersion.flatMap(EWSVersion.init(rawValue:)) ?? .default
            switch try attempt.prove(ewsURL: liveURL, credentials: credentials, version: version) {
            case .proven:
                guard try offer(credentials, record: request.record, endpoint: endpoint, device: request.presenter.tokenHash, context: context) else {
                    return .failed
                }
                return .proven(endpoint: endpoint)
            case .refused(let outcome):
                return outcome
            }
        }
    }

    /// Seals `credentials` to the live subscription's box key (`CredentialBox`) and
    /// leaves them for its next callback; false when the record has no keyed
    /// subscription at `endpoint`, the server the credentials were proven at. `device`
    /// supplied them (its token hash).
    private func offer(_ credentials: EWSCredentials, record: UserRecord, endpoint: String, device: [UInt8], context: RequestContext) throws -> Bool {
        let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        let generation: Int64
        let publicKey: [UInt8]
        switch try store.liveBoxKey(recordID: record.id, endpoint: endpoint) {
        case .key(let liveGeneration, let key):
            (generation, publicKey) = (liveGeneration, key)
        case .none:
            return false
        case .tampered:
            context.logger.error("fresh credentials not sealed: the subscription's box key fails its integrity check",
                                 metadata: ["record": "\(record.id)"])
            return false
        }
        let box = try CredentialBox.seal(CallbackPayload(credentials: credentials).encoded, to: P256PublicKey(bytes: publicKey),
                                         recordID: record.id, generation: generation)
        try store.offerFreshCredentials(recordID: record.id, generation: generation, box: box, suppliedBy: device, now: .now())
        return true
    }

    private func subscribe(_ request: MailboxRequest, client: EWSClient, context: RequestContext) throws -> MailboxOutcome {
        let attempt = Attempt(request: request, context: context, settings: settings)
        guard let state = try attempt.store.subscriptionState(recordID: request.record.id) else { return .failed }
        guard try request.proofAllowed(context: context) else { return .throttled(retryAfter: context.settings.exchange.proofWindow) }
        guard let credentials = try attempt.credentials() else { return .authenticationFailed }
        // 1. Where the mailbox's EWS lives.
        switch try attempt.ownEndpoint(credentials: credentials, client: client, now: .now()) {
        case .found(let endpoint):
            return try subscribe(at: endpoint, credentials: credentials, state: state, attempt: attempt, client: client, context: context)
        case .refused(let outcome):
            return outcome
        }
    }

    /// Subscribes the mailbox at `endpoint`, the server the device's own registration
    /// led to, after proving the credentials there.
    private func subscribe(at endpoint: Endpoint, credentials: EWSCredentials, state: MailSubscriptionStore.SubscriptionState, attempt: Attempt,
                           client: EWSClient, context: RequestContext) throws -> MailboxOutcome {
        guard !settings.callbackURL.isEmpty else {
            context.logger.error("exchange.callback_url is not set; cannot subscribe with Exchange")
            return .failed
        }
        let request = attempt.request
        let store = attempt.store
        let now = Timestamp.now()
        let ewsURL = endpoint.url
        let cachedDomain = endpoint.cachedDomain
        guard let origin = URLParts(ewsURL)?.origin else { return .failed }
        // 2. A live subscription is replaced by a server the device named itself only if
        // it is the mailbox's own Exchange: otherwise anyone with the app and an address
        // could point the record at an EWS of their own. (What discovery finds for the
        // address is the mailbox's own by definition.) When nothing confirms either
        // server, ENS cannot tell the owner from whoever named a server first: a device
        // whose credentials open the mailbox at the server it named gets a subscription
        // of its own there (a claim, made by the device API), and each hears only its own.
        if endpoint.named, state.isLive, let current = state.backendURL, !Self.sameServer(ewsURL, current),
           case let cached = try attempt.cachedAnswer(now: now),
           !attempt.isMailboxExchange(ewsURL, cachedAnswer: cached, credentials: credentials, client: client) {
            // The live server is the confirmed one: the named one is not the mailbox's.
            if attempt.isConfirmed(current, cachedAnswer: cached, client: client) {
                context.logger.warning("registration refused: ewsUrl is not this mailbox's Exchange", metadata: ["record": "\(request.record.id)"])
                try attempt.recordProofFailure()
                return .endpointNotTrusted
            }
            switch try attempt.prove(ewsURL: ewsURL, credentials: credentials, version: EWSVersion(exchVersion: request.protocolVersion)) {
            case .proven:
                context.logger.info("ewsUrl is not confirmed as this mailbox's Exchange: subscribing there as a claim of its own",
                                    metadata: ["record": "\(request.record.id)"])
                return .ownServer(endpoint: origin)
            case .refused(let outcome):
                return outcome
            }
        }

        // 3. The credentials open this mailbox there (and the server's schema version).
        let version: EWSVersion
        switch try attempt.prove(ewsURL: ewsURL, credentials: credentials, version: EWSVersion(exchVersion: request.protocolVersion)) {
        case .proven(let accepted):
            version = accepted
        case .refused(let outcome):
            // A cached URL that no longer answers is forgotten; the next try rediscovers.
            if outcome == .failed, let cachedDomain { try? attempt.autodiscoverCache.forget(domain: cachedDomain) }
            return outcome
        }

        // 4. The attempt's generation, its callback URL (record, generation and a key of
        // its own, sealed: no record id in clear), and the credentials stored sealed under that key and the master key:
        // before Subscribe, since Exchange may call back at once.
        guard let (generation, _) = try store.beginRegistration(recordID: request.record.id, now: now) else { return .failed }
        let (token, seal) = try CallbackToken.makeSealed(recordID: request.record.id, generation: generation,
                                                         bucket: context.urlBucket(userID: request.record.userID), vault: context.services.vault)
        let callbackURL = settings.callbackURL + token
        guard callbackURL.utf8.count <= Self.maximumCallbackURLLength else {
            context.logger.warning("exchange.callback_url too long for Exchange", metadata: ["url.length": "\(callbackURL.utf8.count)"])
            return .failed
        }
        // The subscription's box key: its private half is stored only with the
        // credentials, so later credentials (`offerCredentials`) can be sealed to it by
        // a check-in that cannot read the current ones.
        let boxKey = try P256KeyAgreementKey.generate()
        let stored = try StoredCredentials(credentials: CallbackPayload(credentials: credentials).encoded, boxKey: boxKey)
        try store.storeCredentials(recordID: request.record.id, generation: generation, sealed: seal.seal(stored.encoded),
                                   boxPublicKey: boxKey.publicKey.x963, suppliedBy: request.presenter.tokenHash, now: now)

        // 5. Subscribe, in the version the proof found the server accepts.
        let subscription: PushSubscription
        do {
            subscription = try client.subscribe(
                ewsURL: ewsURL, credentials: credentials, version: version,
                callbackURL: callbackURL, statusFrequencyMinutes: settings.statusFrequency.wholeMinutes
            )
        } catch .unauthorized(let status) {
            context.logger.info("subscribe: Exchange refused the credentials", metadata: ["http.status": "\(status)"])
            try attempt.recordProofFailure()
            return .authenticationFailed
        } catch {
            context.logger.warning("subscribe failed", metadata: ["error": "\(error)"])
            if let cachedDomain { try? attempt.autodiscoverCache.forget(domain: cachedDomain) }
            return .failed
        }
        let won = try store.completeRegistration(
            recordID: request.record.id, generation: generation, backend: .ews, backendURL: ewsURL, endpoint: origin, subscriptionID: subscription.id,
            watermark: subscription.watermark, version: subscription.version.rawValue,
            heartbeatMinutes: settings.statusFrequency.wholeMinutes, now: now
        )
        // Lost to a later concurrent registration: that one's subscription stays, this
        // one's first callback is answered Unsubscribe. The proof held either way.
        context.logger.info(won ? "subscribed" : "subscribed, but a later registration of the record won", metadata: [
            "record": "\(request.record.id)", "generation": "\(generation)", "ews.version": "\(subscription.version.rawValue)",
        ])
        return .subscribed(endpoint: origin)
    }
}

/// Where a registering device's mailbox is, by the device's own account: the
/// `ewsUrl` it named, or what Autodiscover (or its cache) finds for its address.
struct Endpoint {
    let url: String
    /// The domain whose cached Autodiscover answer this is: forgotten if it fails.
    let cachedDomain: String?
    /// Named by the device (`ewsUrl`) rather than found by discovery.
    let named: Bool
}

enum EndpointResolution {
    case found(Endpoint)
    case refused(MailboxOutcome)
}

/// One registration's Exchange conversation: the credentials in EWS form, and the
/// proof itself, whose failures count against the device and address presenting it
/// (`ProofThrottle`).
private struct Attempt {
    let request: MailboxRequest
    let context: RequestContext
    let store: MailSubscriptionStore
    let autodiscoverCache: AutodiscoverCache

    init(request: MailboxRequest, context: RequestContext, settings: ExchangeSettings) {
        self.request = request
        self.context = context
        self.settings = settings
        store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        autodiscoverCache = AutodiscoverCache(database: context.database, vault: context.services.vault)
    }

    let settings: ExchangeSettings

    /// Where this device's mailbox is, by its own registration: the `ewsUrl` it names
    /// (https only), else the cached or live Autodiscover answer for its address.
    func ownEndpoint(credentials: EWSCredentials, client: EWSClient, now: Timestamp) throws -> EndpointResolution {
        if let given = request.credentials.serverURL {
            guard Autodiscover.isHTTPS(given), URLParts(given) != nil else {
                context.logger.info("registration refused: ewsUrl is not https")
                return .refused(.failed)
            }
            return .found(Endpoint(url: given, cachedDomain: nil, named: true))
        }
        guard let domain = Autodiscover.domain(of: request.mailbox) else { return .refused(.autodiscoverFailed) }
        if let cached = try autodiscoverCache.ewsURL(domain: domain, now: now) {
            return .found(Endpoint(url: cached, cachedDomain: domain, named: false))
        }
        switch Autodiscover(client: client).discover(email: request.mailbox, credentials: credentials) {
        case .found(let url, let trusted):
            // What the plain-HTTP redirect step led to is used this once only.
            let lifetime = settings.autodiscoverCacheLifetime
            if lifetime > .zero && trusted { try autodiscoverCache.remember(domain: domain, ewsURL: url, expiresAt: now.adding(lifetime)) }
            return .found(Endpoint(url: url, cachedDomain: nil, named: false))
        case .unauthorized:
            context.logger.info("autodiscover: credentials refused")
            try recordProofFailure()
            return .refused(.authenticationFailed)
        case .notFound:
            context.logger.info("autodiscover found no EWS endpoint")
            return .refused(.autodiscoverFailed)
        }
    }

    func recordProofFailure() throws {
        try request.recordProofFailure(context: context)
    }

    /// The request's credentials in EWS form; nil (a failed proof) for a PKCS#12 bundle
    /// that does not open with its password.
    func credentials() throws -> EWSCredentials? {
        switch request.credentials.method {
        case .basic(let userName, let password):
            return EWSCredentials(method: .basic(userName: userName, password: password), mailbox: request.mailbox)
        case .oauth(let accessToken):
            return EWSCredentials(method: .oauth(accessToken: accessToken), mailbox: request.mailbox, refresh: request.credentials.oauthRefresh)
        case .graph:
            // Only a Graph tenant's mailbox can use it; no configured tenant has this domain.
            context.logger.info("registration: a Graph access token for a mailbox no configured Graph tenant serves")
            return nil
        case .certificate(let pkcs12, let password):
            do {
                return EWSCredentials(method: .certificate(try ClientIdentity(pkcs12: pkcs12, password: password)), mailbox: request.mailbox)
            } catch {
                context.logger.info("registration: the client certificate bundle does not open", metadata: ["error": "\(error.operation)"])
                try recordProofFailure()
                return nil
            }
        }
    }

    /// Opens the named mailbox's Inbox (GetFolder) at `ewsURL` with the credentials,
    /// stepping down schema versions while the server refuses them. Success carries
    /// the version the server accepted; a refusal counts against the presenter.
    func prove(ewsURL: String, credentials: EWSCredentials, version start: EWSVersion) throws -> Proof {
        let client = try context.ewsClient()
        var version = start
        while true {
            do {
                // Challenge first: the credentials go to this server only if it asks.
                _ = try client.inboxUnreadCount(ewsURL: ewsURL, credentials: credentials, version: version, mailbox: request.mailbox,
                                                timeout: settings.timeout, challengeFirst: true)
            } catch where error.isInvalidServerVersion {
                guard let older = version.older else { return .refused(.failed) }
                version = older
                continue
            } catch .unauthorized(let status) {
                context.logger.info("proof of possession: Exchange refused the credentials", metadata: ["http.status": "\(status)"])
                try recordProofFailure()
                return .refused(.authenticationFailed)
            } catch .responseError(let code) where Self.mailboxRefusals.contains(code) {
                // Valid credentials, but not for this mailbox: someone else's account.
                context.logger.warning("proof of possession: the credentials do not open this mailbox", metadata: ["ews.code": "\(code)"])
                try recordProofFailure()
                return .refused(.authenticationFailed)
            } catch {
                context.logger.warning("proof of possession failed", metadata: ["error": "\(error)"])
                return .refused(.failed)
            }
            try request.recordProofSuccess(context: context)
            return .proven(version)
        }
    }

    /// What Exchange answers when the credentials are good but not for the mailbox named.
    static let mailboxRefusals: Set<String> = ["ErrorAccessDenied", "ErrorNonExistentMailbox", "ErrorMailboxNotFound", "ErrorFolderNotFound"]

    /// The address's cached Autodiscover answer, if one is kept (read once per decision).
    func cachedAnswer(now: Timestamp) throws -> String? {
        guard let domain = Autodiscover.domain(of: request.mailbox) else { return nil }
        return try autodiscoverCache.ewsURL(domain: domain, now: now)
    }

    /// Whether `candidate` is confirmed without asking anyone: a host the operator lists
    /// (exchange.allowed_hosts), or the address's cached Autodiscover answer.
    func isConfirmed(_ candidate: String, cachedAnswer: String?, client: EWSClient) -> Bool {
        if let host = URLParts(candidate)?.host, client.configuration.destinationPolicy.lists(host: host) { return true }
        return cachedAnswer.map { ExchangeRegistrar.sameServer($0, candidate) } ?? false
    }

    /// Whether `candidate` may replace a live subscription's endpoint: a host the
    /// operator lists (exchange.allowed_hosts), or the host Autodiscover finds for the
    /// address over https (from the cache, else asked now).
    func isMailboxExchange(_ candidate: String, cachedAnswer: String?, credentials: EWSCredentials, client: EWSClient) -> Bool {
        if isConfirmed(candidate, cachedAnswer: cachedAnswer, client: client) { return true }
        guard Autodiscover.domain(of: request.mailbox) != nil else { return false }
        guard case .found(let discovered, trusted: true) = Autodiscover(client: client).discover(email: request.mailbox,
                                                                                                 credentials: credentials) else {
            return false
        }
        return ExchangeRegistrar.sameServer(discovered, candidate)
    }
}

/// What a proof of possession found: the schema version the server accepted, or the
/// outcome the API answers.
enum Proof {
    case proven(EWSVersion)
    case refused(MailboxOutcome)
}
