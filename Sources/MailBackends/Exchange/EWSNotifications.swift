public import ENSHTTP
public import ENSModel
public import ENSStore
public import ENSVault
internal import EWS
internal import Logging
internal import OpenSSL
internal import Curl
internal import POSIX

/// EWS's push notifications: Exchange POSTs SendNotification documents to
/// /ews/<record>/<generation>/<key or sealed>, the callback URL a registration gave it.
///
/// Not behind ApiToken: the URL's MAC authenticates it (`CallbackToken`), and its key
/// opens the stored credentials GetItem and GetFolder use. The answer is a
/// SendNotificationResult whose SubscriptionStatus is OK or Unsubscribe. What every
/// backend's callbacks share is `MailCallback`.
public struct EWSNotifications: MailNotificationSource {
    public let backend = MailBackend.ews
    public let pathPrefix = "/ews/"
    /// SendNotification bodies are small; MoreEvents splits large batches.
    public let maximumBodyBytes = 1_048_576

    public func authenticate(_ suffix: String, vault: Vault) -> CallbackToken? {
        CallbackToken(path: suffix, vault: vault)
    }

    public func events(in body: [UInt8]) throws -> MailEvents {
        let message = try SendNotification(xml: body)
        return MailEvents(
            subscriptionIDs: message.notifications.map(\.subscriptionID),
            newItemIDs: message.notifications.flatMap(\.newItemIDs),
            failures: message.failures.map { MailEvents.Failure(subscriptionID: $0.subscriptionID, code: $0.code) },
            heartbeat: message.notifications.contains(where: \.heartbeat),
            watermark: message.notifications.last { $0.lastWatermark != nil }?.lastWatermark
        )
    }

    public func answer(unsubscribe: Bool) -> APIResponse {
        APIResponse(status: 200, body: SOAP.sendNotificationResult(unsubscribe: unsubscribe), contentType: "text/xml; charset=utf-8")
    }

    /// The credentials come from the database, opened with the URL's key (a keyed URL),
    /// or from the URL itself (one made before credentials moved to the database). None
    /// (a superseded attempt's, erased, or damaged): nil, logged with the reason, and the
    /// callback answers Unsubscribe (`MailCallback`): nothing can read this mailbox.
    /// Keyed OAuth credentials that carry a refresh token come with an `OAuthRenewal`.
    public func reader(_ address: CallbackToken, record: MailSubscriptionStore.CallbackRecord,
                       context: RequestContext) throws -> (any MailboxReader)? {
        let credentials: EWSCredentials
        var renewal: OAuthRenewal?
        do {
            if let seal = try address.credentialSeal(vault: context.services.vault) {
                let stored: StoredCredentials
                if address.generation == record.generation, let live = record.liveCredentials {
                    stored = try StoredCredentials(encoded: seal.open(live))  // read with the record
                } else {
                    guard let taken = try storedCredentials(address, seal: seal, context: context) else { return nil }
                    stored = taken
                }
                credentials = try CallbackPayload(encoded: stored.credentials).credentials
                if credentials.refresh != nil {
                    renewal = OAuthRenewal(credentials: credentials, address: address, seal: seal, stored: stored, context: context)
                }
            } else {
                guard let payload = try address.openCarried(recordKeyMaterial: record.keyMaterial, vault: context.services.vault) else {
                    context.logger.warning("callback credentials: the URL carries none that open", metadata: ["record": "\(record.id)"])
                    return nil
                }
                credentials = try CallbackPayload(encoded: payload).credentials
            }
        } catch let error as DatabaseError {
            throw error  // the database is away: the callback is answered 503 and retried
        } catch {
            // Which failure it was (a seal that does not open, a payload that does not
            // decode) goes to the log; never a value.
            context.logger.error("callback credentials do not open", metadata: ["record": "\(record.id)", "error": "\(error)"])
            return nil
        }
        return EWSMailboxReader(client: try context.ewsClient(), credentials: credentials, renewal: renewal, ewsURL: record.backendURL,
                                version: record.backendVersion.flatMap(EWSVersion.init(rawValue:)) ?? .default, recordID: record.id)
    }
    public init() {

    }
}

extension EWSNotifications {
    /// A keyed subscription's credentials. When a check-in or a registration left fresh
    /// ones (sealed to the subscription's box key), the newest become current here, the
    /// only place that can open them, and every older fresh row is erased.
    func storedCredentials(_ address: CallbackToken, seal: CredentialSeal, context: RequestContext) throws -> StoredCredentials? {
        let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        guard let (sealed, fresh) = try store.storedCredentials(recordID: address.recordID, generation: address.generation) else { return nil }
        let stored = try StoredCredentials(encoded: seal.open(sealed))
        guard let fresh else { return stored }
        var current = stored.credentials
        if let opened = CredentialBox.open(fresh.box, with: try stored.boxKey(), recordID: address.recordID, generation: address.generation),
           let offered = try? CallbackPayload(encoded: opened).credentials {
            // A check-in's OAuth token comes without the mailbox: keep the anchor. The
            // stored credentials are sealed under the master key and only ENS writes
            // them, so they always decode; if they ever did not, this throws into the
            // "damaged" path (no reader, a generic push) rather than adopting fresh
            // credentials that have lost their mailbox.
            let mailbox = try offered.mailbox ?? CallbackPayload(encoded: current).credentials.mailbox
            current = CallbackPayload(credentials: EWSCredentials(method: offered.method, mailbox: mailbox, refresh: offered.refresh)).encoded
            context.logger.info("fresh credentials taken for the subscription", metadata: ["record": "\(address.recordID)"])
        } else {
            context.logger.warning("fresh credentials did not open; dropped", metadata: ["record": "\(address.recordID)"])
        }
        let adopted = stored.replacingCredentials(with: current)
        try store.adoptFreshCredentials(recordID: address.recordID, generation: address.generation,
                                        sealed: seal.seal(adopted.encoded), fresh: fresh)
        return adopted
    }
}

/// GetItem (sender and subject) and GetFolder (the Inbox's unread count) at the
/// subscription's EWS URL, with the subscription's credentials. An OAuth access token
/// is renewed (`OAuthRenewal`) before the first lookup when it is known to have
/// expired, or after Exchange refuses it; at most once per callback.
private struct EWSMailboxReader: MailboxReader {
    let client: EWSClient
    let credentials: EWSCredentials
    let renewal: OAuthRenewal?
    let ewsURL: String?
    let version: EWSVersion
    let recordID: Int64

    func lookUp(itemIDs: [String], unreadCount: Bool, budget: Duration, logger: Logger) -> MailLookup {
        var lookup = MailLookup()
        guard let ewsURL else { return lookup }
        let deadline = Deadline.after(budget)
        var credentials = self.credentials
        /// One lookup; a 401 renews the token (once per callback) and tries again.
        func withCredentials<T>(_ lookup: (EWSCredentials) throws(EWSError) -> T) throws(EWSError) -> T {
            do {
                return try lookup(credentials)
            } catch .unauthorized(let status) {
                guard let renewal, let renewed = renewal.renew(client: client, deadline: deadline,
                                                               logger: logger) else { throw .unauthorized(status: status) }
                credentials = renewed
                return try lookup(credentials)
            }
        }
        // One budget for the renewal and both lookups together.
        client.withDeadline(budget) {
            if let renewal, renewal.isDue(now: .now()), let renewed = renewal.renew(client: client, deadline: deadline, logger: logger) {
                credentials = renewed
            }
            if !itemIDs.isEmpty {
                do {
                    lookup.summaries = try withCredentials { credentials throws(EWSError) in
                        try client.messages(ewsURL: ewsURL, credentials: credentials, version: version, itemIDs: itemIDs, timeout: budget)
                    }
                } catch {
                    logger.warning("GetItem failed; sending generic alerts", metadata: ["record": "\(recordID)", "error": "\(error)"])
                }
            }
            if unreadCount {
                do {
                    lookup.unreadCount = try withCredentials { credentials throws(EWSError) in
                        try client.inboxUnreadCount(ewsURL: ewsURL, credentials: credentials, version: version, timeout: budget)
                    }
                } catch {
                    logger.warning("GetFolder failed; no badge", metadata: ["record": "\(recordID)", "error": "\(error)"])
                }
            }
        }
        return lookup
    }
}
