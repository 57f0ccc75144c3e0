internal import Codecs
public import ENSCore
public import Logging
internal import EWS
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
/// watermarks are recorded; new mail is looked up within exchange.item_timeout_ms and
/// handed to the sender, one notification per device and message. The answer is OK
/// only once the sender has acknowledged every notification; if it cannot, the answer
/// is 503 and the backend delivers the same batch again later, so no new-mail event is
/// lost. Redelivered batches produce the same notification ids, which are collapse
/// ids, so a device shows a message once.
enum MailCallback {
    /// How long a registration attempt may sit between Subscribe and its commit before
    /// callbacks of its generation stop being asked to retry (a responder that died
    /// there leaves an orphan subscription, which the unsubscribe answer then ends).
    static let pendingRegistrationSeconds = 120

    static func route<Source: MailNotificationSource>(_ source: Source) -> Route {
        Route(methods: ["POST"], requiresAPIToken: false, body: .xml(limit: source.maximumBodyBytes)) { request, context in
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
            guard let row = try store.callbackRecord(id: address.recordID), row.backend == source.backend else {
                logger.info("callback for a deleted record: unsubscribing", metadata: ["record": "\(record)"])
                return source.answer(unsubscribe: true)
            }
            if address.generation > row.generation && address.generation <= row.pendingGeneration,
               let started = row.pendingStartedAt, started.adding(seconds: Int64(pendingRegistrationSeconds)) > .now() {
                // A registration between its Subscribe and its commit: the backend
                // retries this batch, by then the subscription is recorded (or lost its race).
                logger.info("callback for a registration not yet recorded: asking for a retry", metadata: ["record": "\(record)"])
                return retryLater
            }
            guard row.generation == address.generation else {
                logger.info("callback from a superseded subscription: unsubscribing", metadata: ["record": "\(record)", "generation": "\(address.generation)"])
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
            let now = Timestamp.now()
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
                let outcome = try context.services.callbackGate.ifAvailable { () throws -> Delivery in
                    try deliver(items: items, row: row, reader: reader, store: store, watermark: watermark, now: now)
                }
                if outcome == nil { logger.warning("callback lookups at capacity; the mail server will retry", metadata: ["record": "\(record)"]) }
                guard let outcome, outcome.delivered else { return retryLater }
                recorded = outcome.recorded
            }
            if !recorded { try store.recordCallback(recordID: row.id, generation: row.generation, watermark: watermark, now: now) }
            logger.debug("callback answered", metadata: ["record": "\(record)", "items": "\(items.count)", "heartbeat": "\(events.heartbeat)"])
            return source.answer(unsubscribe: false)
        }

        /// What `deliver` did: whether the sender took every notification (else the
        /// caller answers 503), and whether the callback is already recorded as heard.
        struct Delivery {
            let delivered: Bool
            let recorded: Bool
        }

        /// Looks the items up and hands one notification per (device, item) to the sender.
        private func deliver(items: [String], row: MailSubscriptionStore.CallbackRecord, reader: any MailboxReader,
                             store: MailSubscriptionStore, watermark: String?, now: Timestamp) throws -> Delivery {
            let settings = context.settings.callbacks
            let devices = try store.notifiableDevices(recordID: row.id, now: now, limit: settings.maximumDevicesPerRecord)
            guard !devices.isEmpty else { return Delivery(delivered: true, recorded: false) }
            // Caps (docs/exchange.md, "Limits"): a batch of more items than
            // exchange.max_items_per_callback, or one that would take the record past
            // exchange.max_notifications_per_minute, becomes one "N new messages" alert
            // per device; past the rate cap even that, the batch is dropped and said so.
            let perItem = items.count <= settings.maximumItemsPerCallback
            guard let reserved = try store.reserveNotifications(
                recordID: row.id, preferring: perItem ? items.count * devices.count : devices.count, orElse: devices.count,
                limit: settings.maximumNotificationsPerMinute, watermark: watermark, now: now
            ) else {
                logger.warning("notification rate cap reached for the record; this batch is not pushed", metadata: [
                    "record": "\(row.id)", "items": "\(items.count)", "devices": "\(devices.count)",
                ])
                return Delivery(delivered: true, recorded: false)
            }
            let summarized = !perItem || reserved < items.count * devices.count
            if summarized {
                logger.info("new mail summarized: over a per-callback or per-minute cap", metadata: ["record": "\(row.id)", "items": "\(items.count)"])
            }

            // Sender and subject; if the server is slow or fails, a generic alert still
            // goes. A summary's id is derived from the batch, so a redelivery of it
            // collapses on the device like any other.
            let lookup = reader.lookUp(itemIDs: summarized ? [] : items, unreadCount: devices.contains(where: \.device.badge),
                                       budget: settings.lookupBudget, logger: logger)
            let summaries = summarized
                ? [MailSummary(itemID: "summary:\(items.first ?? ""):\(items.last ?? ""):\(items.count)",
                               subject: "\(items.count) new messages", senderName: "New mail")]
                : items.map { item in lookup.summaries.first { $0.itemID == item } ?? MailSummary(itemID: item, subject: "", senderName: "New mail") }

            let sender = SenderClient(socketPath: settings.pushSocket)
            let policy = try context.policyClient()
            let allowOnError = context.settings.devicePolicy?.allowOnError ?? false
            for target in devices {
                if let deviceID = target.device.ewsDeviceID, let policy {
                    switch policy.decision(deviceID: deviceID) {
                    case .allowed: break
                    case .denied:
                        logger.info("SEG policy denies the device; no push", metadata: ["device": "\(target.device.id)"])
                        continue
                    case .unreachable:
                        logger.warning("SEG policy service unreachable", metadata: ["device": "\(target.device.id)", "policy.on_error": "\(allowOnError ? "allow" : "deny")"])
                        if !allowOnError { continue }
                    }
                }
                for summary in summaries {
                    let payload = MailPayload(
                        sender: summary.senderName, subject: summary.subject, userID: row.userID,
                        badge: target.device.badge ? lookup.unreadCount : nil, sound: target.device.defaultSound, syncKey: target.syncKey
                    )
                    let notification = PushNotification(
                        id: Hex.encode(Array(Digest.sha256("mail:\(row.id):\(target.device.id):\(summary.itemID)").prefix(16))),
                        deviceToken: target.token, topic: target.device.bundleID,
                        environment: target.device.development ? .sandbox : .production, pushType: .alert,
                        expiration: now.adding(settings.notificationTTL).millisecondsSinceEpoch / 1000,
                        payload: payload.encoded, deviceRowID: target.device.id
                    )
                    do {
                        switch try sender.submit(notification) {
                        case .accepted:
                            continue
                        case .refused(let reason) where reason == "bad-notification" || reason == "bad-frame":
                            // A notification the sender will never take: retrying cannot help.
                            logger.error("ens-apns refused a malformed notification", metadata: ["record": "\(row.id)", "reason": "\(reason)"])
                        case .refused(let reason):
                            // spool-full, io-error, busy: not acknowledged, so not ours to
                            // lose. The mail server redelivers the batch after a 503.
                            logger.error("ens-apns did not take a notification; the mail server will retry", metadata: ["record": "\(row.id)", "reason": "\(reason)"])
                            return Delivery(delivered: false, recorded: true)
                        }
                    } catch {
                        logger.error("ens-apns unreachable; the mail server will retry", metadata: ["record": "\(row.id)", "error": "\(error)"])
                        return Delivery(delivered: false, recorded: true)
                    }
                }
            }
            return Delivery(delivered: true, recorded: true)
        }
    }
}
