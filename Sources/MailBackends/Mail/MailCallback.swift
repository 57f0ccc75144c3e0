public import ENSHTTP
internal import ENSConfig
internal import Codecs
public import ENSModel
public import ENSStore
public import ENSVault
public import Logging
internal import OpenSSL
internal import POSIX

/// One mail backend's side of its change notifications: where they arrive, how their
/// URL is authenticated, what their body says, what answer the backend expects, and
/// how the new messages are looked up. EWS's is `EWSNotifications`.
public protocol MailNotificationSource: Sendable {
    /// An authenticated callback address: which record and subscription generation the
    /// callback is for, and whatever opens the credentials it carries.
    associatedtype Address: CallbackAddress

    var backend: MailBackend { get }
    /// The path prefix the router gives this source (EWS: "/ews/").
    var pathPrefix: String { get }
    var maximumBodyBytes: Int { get }

    /// Authenticates the path after the prefix; nil (403) for anything forged, before
    /// any database work.
    func authenticate(_ suffix: String, vault: Vault) -> Address?
    /// The body in words every backend shares; a throw is a 400.
    func events(in body: [UInt8]) throws -> MailEvents
    /// The answer the backend expects: go on, or end this subscription.
    func answer(unsubscribe: Bool) -> APIResponse
    /// A reader of the record's mailbox with the credentials the callback carries; nil
    /// when they no longer open (the record's key changed: the subscription is retired).
    func reader(_ address: Address, record: MailSubscriptionStore.CallbackRecord, context: RequestContext) throws -> (any MailboxReader)?
}

/// What an authenticated callback URL names.
public protocol CallbackAddress: Sendable {
    var recordID: Int64 { get }
    var generation: Int64 { get }
    /// The user's bucket, if the URL names it (`ShardMap`): the callback's shard.
    var bucket: Int? { get }
}

extension CallbackToken: CallbackAddress {}

/// Looks new messages up in one mailbox, for one callback.
public protocol MailboxReader {
    /// Sender and subject of the messages it could fetch (the others are left out),
    /// and the Inbox's unread count when asked; all within one budget. Failures are
    /// logged here and leave their part empty: a generic alert still goes.
    func lookUp(itemIDs: [String], unreadCount: Bool, budget: Duration, logger: Logger) -> MailLookup
}

public struct MailLookup: Sendable {
    public var summaries: [MailSummary]
    public var unreadCount: Int?

    public init(summaries: [MailSummary] = [], unreadCount: Int? = nil) {
        self.summaries = summaries
        self.unreadCount = unreadCount
    }
}

/// What every backend's callbacks share, after their URL and body were read: the
/// record must exist and be at the URL's generation and subscription, otherwise the
/// answer ends the subscription (for EWS, the only way to end one); heartbeats and
/// watermarks are recorded (a heartbeat's within a second, in a batch); new mail is
/// looked up within exchange.item_timeout_ms and handed to the sender, one
/// notification per device and message. The answer is OK
/// only once the sender has acknowledged every notification; if it cannot, the answer
/// is 503 and the backend delivers the same batch again later, so no new-mail event is
/// lost. Redelivered batches produce the same notification ids, which are collapse
/// ids, so a device shows a message once.
public enum MailCallback {
    public static func route<Source: MailNotificationSource>(_ source: Source) -> Route {
        Route(methods: ["POST"], requiresAPIToken: false, body: .xml(limit: source.maximumBodyBytes), bucket: { request, context in
            source.authenticate(String(request.path.dropFirst(source.pathPrefix.count)), vault: context.services.vault)?.bucket
        }) { request, context in
            guard let address = source.authenticate(String(request.path.dropFirst(source.pathPrefix.count)), vault: context.services.vault) else {
                context.logger.warning("callback refused: URL failed authentication")
                return APIResponse.error(403, .forbidden, "This callback URL is not valid.")
            }
            let events: MailEvents
            do {
                events = try source.events(in: request.body)
            } catch {
                context.logger.warning("callback refused: not a notification", metadata: ["record": "\(address.recordID)", "reason": "\(error)"])
                return notANotification
            }
            return try Handler(source: source, address: address, events: events, context: context).respond()
        }
    }

    static let notANotification = APIResponse.error(400, .invalidRequest, "The request is not a SendNotification message.")
    static let retryLater = APIResponse.error(503, .serviceUnavailable, "The service is temporarily unavailable; retry later.")

    /// One callback's work, after the URL and the body were accepted.
    private struct Handler<Source: MailNotificationSource> {
        let source: Source
        let address: Source.Address
        let events: MailEvents
        let context: RequestContext

        var logger: Logger { context.logger }

        func respond() throws -> APIResponse {
            let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
            let record = "\(address.recordID)"
            let now = Timestamp.now()
            // The record and its devices in one read; a heartbeat's, the record alone.
            let found = events.newItemIDs.isEmpty
                ? try store.callbackRecord(id: address.recordID).map { ($0, [MailSubscriptionStore.NotifiableDevice]()) }
                : try store.callbackRecordAndDevices(id: address.recordID, now: now, limit: context.settings.deviceAPI.maximumDevicesPerRecord)
            guard let (row, devices) = found, row.backend == source.backend else {
                logger.info("callback for a deleted record: unsubscribing", metadata: ["record": "\(record)"])
                return source.answer(unsubscribe: true)
            }
            if row.isRegistrationPending(generation: address.generation, now: now) {
                // A registration between its Subscribe and its commit: the backend
                // retries this batch, by then the subscription is recorded (or lost its race).
                logger.info("callback for a registration not yet recorded: asking for a retry", metadata: ["record": "\(record)"])
                return retryLater
            }
            guard row.generation == address.generation else {
                logger.info("callback from a superseded subscription: unsubscribing",
                            metadata: ["record": "\(record)", "generation": "\(address.generation)"])
                return source.answer(unsubscribe: true)
            }
            if let current = row.subscriptionID, events.subscriptionIDs.contains(where: { $0 != current }) {
                logger.info("callback from a stale subscription: unsubscribing", metadata: ["record": "\(record)"])
                return source.answer(unsubscribe: true)
            }
            if !events.failures.isEmpty {
                // Only an error that names this record's live subscription ends it; one
                // that names none says nothing about which subscription failed.
                let named = events.failures.compactMap(\.subscriptionID)
                guard !named.isEmpty || !events.subscriptionIDs.isEmpty else {
                    logger.warning("callback refused: an error message without a subscription id", metadata: ["record": "\(record)"])
                    return notANotification
                }
                let concernsLive = row.subscriptionID.map { named.contains($0) } ?? true
                logger.warning("the mail server reports a subscription failed", metadata: [
                    "record": "\(record)", "backend.codes": "\(events.failures.map(\.code).joined(separator: ","))", "live": "\(concernsLive)",
                ])
                if concernsLive { try store.markUnsubscribed(recordID: row.id, generation: row.generation) }
                return source.answer(unsubscribe: true)
            }
            guard row.isAuthentic(RowBinding(vault: context.services.vault)) else {
                // Its URL or endpoint was edited without the master key: nothing is
                // looked up there and nothing changes; the mail server retries.
                logger.error("callback refused: the subscription row fails its integrity check", metadata: ["record": "\(record)"])
                return retryLater
            }
            let items = events.newItemIDs
            // The newest watermark, if it fits its column (Exchange's are ~40-100 bytes).
            let watermark = events.watermark.flatMap { $0.utf8.count <= 1024 ? $0 : nil }
            var recorded = false
            if !items.isEmpty {
                guard let reader = try source.reader(address, record: row, context: context) else {
                    // The URL authenticated, so this is one of a record whose key changed: retire it.
                    logger.warning("callback credentials do not open: unsubscribing", metadata: ["record": "\(record)"])
                    return source.answer(unsubscribe: true)
                }
                // Lookups hold a thread for up to exchange.item_timeout_ms: a bounded
                // number at once, so a slow mail server cannot take every thread.
                let delivery = NewMailDelivery(context: context)
                let outcome = try context.services.callbackGate.ifAvailable { () throws -> NewMailDelivery.Outcome in
                    try delivery.deliver(items: items, row: row, notifiable: devices, reader: reader, store: store, watermark: watermark, now: now,
                                         lookupBudget: context.settings.exchange.itemTimeout)
                }
                if outcome == nil { logger.warning("callback lookups at capacity; the mail server will retry", metadata: ["record": "\(record)"]) }
                guard let outcome, outcome.delivered else { return retryLater }
                recorded = outcome.recorded
            }
            if items.isEmpty {
                // A heartbeat (EWS's StatusEvent): its time and watermark go in this
                // process's next batch (`LivenessRecorder`), not in a commit of its own.
                context.services.liveness.callback(recordID: row.id, generation: row.generation, watermark: watermark, at: now, shard: context.shard)
            } else if !recorded {
                try store.recordCallback(recordID: row.id, generation: row.generation, watermark: watermark, now: now)
            }
            logger.debug("callback answered", metadata: ["record": "\(record)", "items": "\(items.count)", "heartbeat": "\(events.heartbeat)"])
            return source.answer(unsubscribe: false)
        }
    }
}
