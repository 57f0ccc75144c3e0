internal import ENSHTTP
internal import Curl
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import EWS
internal import Logging
internal import POSIX

/// Renews a keyed subscription's OAuth access token for one callback (docs/exchange.md,
/// "OAuth refresh"): at most once per callback, and one callback at a time per
/// subscription across every responder and host (`MailSubscriptionStore`'s refresh
/// claim). The one that claims it asks the token endpoint, re-seals the answer under the
/// URL's key (the refresh token usually rotates: the old one is spent) and uses it;
/// another that finds the claim held waits for that answer within its own budget.
///
/// A refusal (the grant revoked or expired, the refresh token reused) is recorded: the
/// token endpoint is not asked again, the notifications go out generic, and check-ins
/// tell the device to register again, until new credentials arrive. A failure that may
/// pass (unreachable, slow, 5xx) is only logged; the next callback tries again.
final class OAuthRenewal {
    private var credentials: EWSCredentials
    private let address: CallbackToken
    private let seal: CredentialSeal
    private let stored: StoredCredentials
    private let store: MailSubscriptionStore
    private var attempted = false

    /// Renewed this long before the expiry the token endpoint gave, so a token does not
    /// run out between the check and Exchange reading it.
    static let expiryMargin = Duration.seconds(60)
    /// How long a claim outlives the callback's budget: a claimant that crashed holds
    /// the subscription's refresh no longer than this.
    static let claimMargin = Duration.seconds(5)
    /// How long before its claim expires (by the database's clock) a claimant's token
    /// request must be over: room for the round trip that read the claim and for two
    /// clocks ticking at slightly different rates.
    static let fenceMargin = Duration.seconds(2)
    /// Less than this left for the token request, and it is not sent at all.
    static let minimumExchange = Duration.milliseconds(500)
    /// How often a callback waiting for another's renewal looks again.
    static let pollInterval = 100

    init(credentials: EWSCredentials, address: CallbackToken, seal: CredentialSeal, stored: StoredCredentials, context: RequestContext) {
        self.credentials = credentials
        self.address = address
        self.seal = seal
        self.stored = stored
        store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
    }

    /// Whether the access token is known to have expired (or is about to).
    func isDue(now: Timestamp) -> Bool {
        guard let expiry = credentials.refresh?.accessTokenExpiresAt else { return false }
        return expiry <= now.adding(Self.expiryMargin)
    }

    /// New credentials, or nil when there are none to be had within `deadline` (the
    /// callback then goes on with what it has: a generic alert at worst).
    func renew(client: EWSClient, deadline: Deadline, logger: Logger) -> EWSCredentials? {
        guard !attempted, let refresh = credentials.refresh else { return nil }
        attempted = true
        var logger = logger
        logger[metadataKey: "record"] = "\(address.recordID)"
        do {
            let budget = Duration.milliseconds(deadline.remainingMilliseconds)
            switch try store.claimCredentialRefresh(recordID: address.recordID, generation: address.generation,
                                                   lifetime: budget + Self.claimMargin) {
            case .claimed(let fence):
                return try exchange(refresh, fence: fence, client: client, deadline: deadline, logger: logger)
            case .heldElsewhere:
                return try awaitOtherRenewal(deadline: deadline, logger: logger)
            case .refused:
                logger.info("the token endpoint refused this subscription's refresh token earlier; generic alerts until new credentials arrive")
                return nil
            case .gone:
                return nil
            }
        } catch {
            logger.error("access token renewal failed", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// Sends the refresh token only while the claim is this callback's by the
    /// database's clock, with a deadline that ends `fenceMargin` before the claim does:
    /// a callback that stalled after claiming (and lost the claim to another, which
    /// rotated the token) never sends the spent token, since libcurl refuses a request
    /// past its deadline. The rotated token is stored, fenced, before the new access
    /// token is used; a claimant that lost its fence meanwhile uses what the winner stored.
    private func exchange(_ refresh: OAuthRefresh, fence claimed: MailSubscriptionStore.RefreshFence, client: EWSClient,
                          deadline: Deadline, logger: Logger) throws -> EWSCredentials? {
        guard let fence = try store.credentialRefreshClaim(recordID: address.recordID, generation: address.generation, fence: claimed),
              fence.remaining - Self.fenceMargin >= Self.minimumExchange else {
            try store.abandonCredentialRefresh(recordID: address.recordID, generation: address.generation, fence: claimed, refusedAt: nil)
            logger.warning("the refresh claim ran out before the token endpoint was asked; not sent")
            return nil
        }
        let window = min(fence.remaining - Self.fenceMargin, Duration.milliseconds(deadline.remainingMilliseconds))
        let renewed: EWSCredentials
        do {
            let answer = try client.withDeadline(window) { () throws(OAuthRefreshError) in try client.refreshAccessToken(refresh) }
            renewed = credentials.refreshed(accessToken: answer.accessToken, refresh: answer.refresh)
        } catch .refused(let reason) {
            try store.abandonCredentialRefresh(recordID: address.recordID, generation: address.generation, fence: fence, refusedAt: .now())
            logger.warning("the token endpoint refused the refresh token; generic alerts, and check-ins ask the device to register again",
                           metadata: ["oauth.error": "\(reason)"])
            return nil
        } catch .unavailable(let reason) {
            try store.abandonCredentialRefresh(recordID: address.recordID, generation: address.generation, fence: fence, refusedAt: nil)
            logger.warning("access token not renewed this time; the next callback tries again", metadata: ["oauth.error": "\(reason)"])
            return nil
        }
        // Stored before it is used: the old refresh token is spent once the endpoint rotated it.
        let sealed = try seal.seal(stored.replacingCredentials(with: CallbackPayload(credentials: renewed).encoded).encoded)
        guard try store.finishCredentialRefresh(recordID: address.recordID, generation: address.generation, fence: fence, sealed: sealed) else {
            // Newer credentials arrived, or a later claimant holds the fence: theirs are
            // the ones stored, and an access token not stored beside its refresh token
            // is not used.
            logger.info("access token renewed, but the claim was superseded meanwhile; the stored credentials are used")
            return try awaitOtherRenewal(deadline: deadline, logger: logger)
        }
        logger.info("access token renewed", metadata: ["rotated": "\(renewed.refresh?.refreshToken != refresh.refreshToken)"])
        credentials = renewed
        return renewed
    }

    /// Another callback holds the claim: its answer, once stored, opened here.
    private func awaitOtherRenewal(deadline: Deadline, logger: Logger) throws -> EWSCredentials? {
        while try store.credentialRefreshUnderWay(recordID: address.recordID, generation: address.generation) {
            guard deadline.remainingMilliseconds > Self.pollInterval else {
                logger.info("another callback is still renewing the access token; generic alerts this time")
                return nil
            }
            sleepMilliseconds(Self.pollInterval)
        }
        guard let (sealed, _) = try store.storedCredentials(recordID: address.recordID, generation: address.generation),
              let current = try? CallbackPayload(encoded: StoredCredentials(encoded: seal.open(sealed)).credentials).credentials,
              current != credentials else { return nil }
        credentials = current
        return current
    }
}
