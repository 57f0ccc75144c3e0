internal import ENSCore
internal import EWS
internal import Logging
internal import OpenSSL

/// /registerdevicev2's Exchange work: find the EWS URL (given, cached, or by
/// Autodiscover), seal the credentials into a callback URL, subscribe the Inbox to
/// push notifications, and record the subscription. Credentials exist only for the
/// duration of this call and inside the sealed URL Exchange keeps.
public struct ExchangeRegistrar: ExchangeRegistering {
    /// Exchange refuses callback URLs of 2,083 characters or more
    /// (ErrorInvalidPushSubscriptionUrl).
    static let maximumCallbackURLLength = 2082

    public init() {}

    public func subscribe(_ request: ExchangeSubscriptionRequest, context: RequestContext) throws -> ExchangeOutcome {
        let configuration = context.configuration
        guard !configuration.exchangeCallbackURL.isEmpty else {
            context.logger.error("exchange.callback_url is not set; cannot subscribe with Exchange")
            return .failed
        }
        guard let credentials = ewsCredentials(request, logger: context.logger) else { return .authenticationFailed }
        let client = try context.ewsClient()
        let store = ExchangeStore(database: context.database, vault: context.services.vault)
        let now = Timestamp.now()

        // 1. Where the mailbox's EWS lives.
        let ewsURL: String
        var cachedDomain: String?
        if let given = request.credentials.ewsURL {
            guard Autodiscover.isHTTPS(given) else {
                context.logger.info("registration refused: ewsUrl is not https")
                return .failed
            }
            ewsURL = given
        } else {
            guard let email = request.email, let domain = Autodiscover.domain(of: email) else { return .autodiscoverFailed }
            if let cached = try store.cachedEWSURL(domain: domain, now: now) {
                ewsURL = cached
                cachedDomain = domain
            } else {
                switch Autodiscover(client: client).discover(email: email, credentials: credentials) {
                case .found(let url):
                    ewsURL = url
                    let hours = Int64(configuration.exchangeAutodiscoverCacheHours)
                    if hours > 0 { try store.cacheEWSURL(domain: domain, ewsURL: url, expiresAt: now.adding(seconds: hours * 3600)) }
                case .unauthorized:
                    context.logger.info("autodiscover: credentials refused")
                    return .authenticationFailed
                case .notFound:
                    context.logger.info("autodiscover found no EWS endpoint")
                    return .autodiscoverFailed
                }
            }
        }

        // 2. A new generation and the callback URL that carries the sealed credentials.
        guard let (generation, keyMaterial) = try store.beginRegistration(recordID: request.record.id) else { return .failed }
        let token = try CallbackToken.make(payload: CallbackPayload(credentials: credentials).encoded, recordID: request.record.id,
                                           generation: generation, recordKeyMaterial: keyMaterial, vault: context.services.vault)
        let callbackURL = configuration.exchangeCallbackURL + token
        guard callbackURL.utf8.count <= Self.maximumCallbackURLLength else {
            context.logger.warning("credentials too large for a callback URL", metadata: ["url.length": "\(callbackURL.utf8.count)"])
            return .failed
        }

        // 3. Subscribe, falling back to older schema versions if the server wants them.
        let subscription: PushSubscription
        do {
            subscription = try client.subscribe(
                ewsURL: ewsURL, credentials: credentials, version: EWSVersion(exchVersion: request.exchangeVersion),
                callbackURL: callbackURL, statusFrequencyMinutes: configuration.exchangeStatusFrequencyMinutes
            )
        } catch .unauthorized(let status) {
            context.logger.info("subscribe: Exchange refused the credentials", metadata: ["http.status": "\(status)"])
            return .authenticationFailed
        } catch {
            context.logger.warning("subscribe failed", metadata: ["error": "\(error)"])
            // A cached URL that no longer answers is forgotten; the next try rediscovers.
            if let cachedDomain { try? store.forgetEWSURL(domain: cachedDomain) }
            return .failed
        }
        _ = try store.completeRegistration(
            recordID: request.record.id, generation: generation, ewsURL: ewsURL, subscriptionID: subscription.id,
            watermark: subscription.watermark, version: subscription.version.rawValue,
            statusFrequencyMinutes: configuration.exchangeStatusFrequencyMinutes, now: now
        )
        context.logger.info("subscribed", metadata: ["record": "\(request.record.id)", "generation": "\(generation)",
                                                      "ews.version": "\(subscription.version.rawValue)"])
        return .subscribed
    }

    /// The request's credentials in EWS form; nil (auth failure) for a PKCS#12 bundle
    /// that does not open with its password.
    private func ewsCredentials(_ request: ExchangeSubscriptionRequest, logger: Logger) -> EWSCredentials? {
        switch request.credentials.method {
        case .basic(let userName, let password):
            return EWSCredentials(method: .basic(userName: userName, password: password), mailbox: request.email)
        case .oauth(let accessToken):
            return EWSCredentials(method: .oauth(accessToken: accessToken), mailbox: request.email)
        case .certificate(let pkcs12, let password):
            do {
                return EWSCredentials(method: .certificate(try ClientIdentity(pkcs12: pkcs12, password: password)), mailbox: request.email)
            } catch {
                logger.info("registration: the client certificate bundle does not open", metadata: ["error": "\(error.operation)"])
                return nil
            }
        }
    }
}
