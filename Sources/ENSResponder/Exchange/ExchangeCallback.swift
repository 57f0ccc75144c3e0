internal import ENSCore
internal import EWS
internal import Logging
internal import OpenSSL

/// POST /ews/<record>/<generation>/<sealed>: Exchange's SendNotification callbacks.
///
/// Not behind ApiToken: the URL's MAC authenticates it, and a URL that fails the
/// check gets 403 before any database work. Then, in order: the record must exist and
/// be at the URL's generation and subscription, otherwise the answer is Unsubscribe
/// (the only way to end a push subscription); heartbeats and watermarks are recorded;
/// new mail is looked up (GetItem, and GetFolder for badges, within
/// exchange.item_timeout_ms) and handed to ens-apns, one notification per device and
/// message. The answer is OK only once ens-apns has acknowledged every notification;
/// if it cannot, the answer is 503 and Exchange retries the same batch later, so no
/// new-mail event is lost. Retried batches produce the same notification ids, which
/// are APNs collapse ids, so a device shows a message once.
enum ExchangeCallback {
    static let prefix = "/ews/"
    /// SendNotification bodies are small; MoreEvents splits large batches.
    static let maximumBodyBytes = 1_048_576
    /// How long a registration attempt may sit between Subscribe and its commit before
    /// callbacks of its generation stop being asked to retry (a responder that died
    /// there leaves an orphan subscription, which Unsubscribe then ends).
    static let pendingRegistrationSeconds = 120

    static let route = Route(methods: ["POST"], requiresAPIToken: false, body: .xml(limit: maximumBodyBytes)) { request, context in
        let vault = context.services.vault
        guard let token = CallbackToken(path: String(request.path.dropFirst(prefix.count)), vault: vault) else {
            context.logger.warning("callback refused: URL failed authentication")
            return APIResponse.error(403, .forbidden, "This callback URL is not valid.")
        }
        let message: SendNotification
        do {
            message = try SendNotification(xml: request.body)
        } catch {
            context.logger.warning("callback refused: bad SendNotification", metadata: ["record": "\(token.recordID)", "reason": "\(error)"])
            return APIResponse.error(400, .invalidRequest, "The request is not a SendNotification message.")
        }
        return try Handler(token: token, message: message, context: context).respond()
    }

    static func answer(unsubscribe: Bool) -> APIResponse {
        APIResponse(status: 200, body: SOAP.sendNotificationResult(unsubscribe: unsubscribe), contentType: "text/xml; charset=utf-8")
    }

    /// One callback's work, after the URL and the document were accepted.
    private struct Handler {
        let token: CallbackToken
        let message: SendNotification
        let context: RequestContext

        var logger: Logger { context.logger }

        func respond() throws -> APIResponse {
            let store = ExchangeStore(database: context.database, vault: context.services.vault)
            let record = "\(token.recordID)"
            guard let row = try store.callbackRecord(id: token.recordID) else {
                logger.info("callback for a deleted record: unsubscribing", metadata: ["record": "\(record)"])
                return answer(unsubscribe: true)
            }
            if token.generation > row.generation && token.generation <= row.pendingGeneration,
               let started = row.pendingStartedAt, started.adding(seconds: Int64(pendingRegistrationSeconds)) > .now() {
                // A registration between its Subscribe and its commit: Exchange retries
                // this batch, by then the subscription is recorded (or lost its race).
                logger.info("callback for a registration not yet recorded: asking Exchange to retry", metadata: ["record": "\(record)"])
                return APIResponse.error(503, .serviceUnavailable, "The service is temporarily unavailable; retry later.")
            }
            guard row.generation == token.generation else {
                logger.info("callback from a superseded subscription: unsubscribing", metadata: ["record": "\(record)", "generation": "\(token.generation)"])
                return answer(unsubscribe: true)
            }
            if let current = row.subscriptionID, message.notifications.contains(where: { $0.subscriptionID != current }) {
                logger.info("callback from a stale subscription: unsubscribing", metadata: ["record": "\(record)"])
                return answer(unsubscribe: true)
            }
            if !message.failures.isEmpty {
                // Only an error that names this record's live subscription ends it; one
                // that names none says nothing about which subscription failed.
                let named = message.failures.compactMap(\.subscriptionID)
                guard !named.isEmpty || !message.notifications.isEmpty else {
                    logger.warning("callback refused: an error message without a subscription id", metadata: ["record": "\(record)"])
                    return APIResponse.error(400, .invalidRequest, "The request is not a SendNotification message.")
                }
                let concernsLive = row.subscriptionID.map { named.contains($0) } ?? true
                logger.warning("Exchange reports a subscription failed", metadata: [
                    "record": "\(record)", "ews.codes": "\(message.errorCodes.joined(separator: ","))", "live": "\(concernsLive)",
                ])
                if concernsLive { try store.markUnsubscribed(recordID: row.id, generation: row.generation) }
                return answer(unsubscribe: true)
            }
            let now = Timestamp.now()
            let items = message.notifications.flatMap(\.newItemIDs)
            // The newest watermark, if it fits its column (Exchange's are ~40-100 bytes).
            let watermark = message.notifications.last { $0.lastWatermark != nil }?.lastWatermark.flatMap { $0.utf8.count <= 1024 ? $0 : nil }
            var recorded = false
            if !items.isEmpty {
                let credentials: EWSCredentials
                do {
                    credentials = try CallbackPayload(encoded: token.open(recordKeyMaterial: row.keyMaterial, vault: context.services.vault)).credentials
                } catch {
                    // The MAC held, so this is a URL of a record whose key changed: retire it.
                    logger.warning("callback credentials do not open: unsubscribing", metadata: ["record": "\(record)"])
                    return answer(unsubscribe: true)
                }
                // Lookups at Exchange hold a thread for up to exchange.item_timeout_ms: a
                // bounded number at once, so a slow Exchange cannot take every thread.
                let outcome = try context.services.callbackGate.ifAvailable { () throws -> Delivery in
                    try deliver(items: items, row: row, credentials: credentials, store: store, watermark: watermark, now: now)
                }
                if outcome == nil { logger.warning("callback lookups at capacity; Exchange will retry", metadata: ["record": "\(record)"]) }
                guard let outcome, outcome.delivered else {
                    return APIResponse.error(503, .serviceUnavailable, "The service is temporarily unavailable; retry later.")
                }
                recorded = outcome.recorded
            }
            if !recorded { try store.recordCallback(recordID: row.id, generation: row.generation, watermark: watermark, now: now) }
            logger.debug("callback answered", metadata: ["record": "\(record)", "items": "\(items.count)",
                                                         "heartbeat": "\(message.notifications.contains(where: \.heartbeat))"])
            return answer(unsubscribe: false)
        }

        /// What `deliver` did: whether ens-apns took every notification (else the caller
        /// answers 503), and whether the callback is already recorded as heard.
        struct Delivery {
            let delivered: Bool
            let recorded: Bool
        }

        /// Looks the items up and hands one notification per (device, item) to ens-apns.
        private func deliver(items: [String], row: ExchangeStore.CallbackRecord, credentials: EWSCredentials,
                             store: ExchangeStore, watermark: String?, now: Timestamp) throws -> Delivery {
            let configuration = context.configuration
            let devices = try store.notifiableDevices(recordID: row.id, now: now, limit: configuration.maximumDevicesPerRecord)
            guard !devices.isEmpty else { return Delivery(delivered: true, recorded: false) }
            // Caps (docs/exchange.md, "Limits"): a batch of more items than
            // exchange.max_items_per_callback, or one that would take the record past
            // exchange.max_notifications_per_minute, becomes one "N new messages" alert
            // per device; past the rate cap even that, the batch is dropped and said so.
            let perItem = items.count <= configuration.exchangeMaximumItemsPerCallback
            guard let reserved = try store.reserveNotifications(
                recordID: row.id, preferring: perItem ? items.count * devices.count : devices.count, orElse: devices.count,
                limit: configuration.exchangeMaximumNotificationsPerMinute, watermark: watermark, now: now
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
            let budget = configuration.exchangeItemTimeoutMilliseconds
            let version = row.ewsVersion.flatMap(EWSVersion.init(rawValue:)) ?? .default
            let client = try context.ewsClient()

            // Sender and subject; if Exchange is slow or fails, a generic alert still goes.
            // A summary's id is derived from the batch, so Exchange's redelivery of it
            // collapses on the device like any other.
            var summaries = summarized
                ? [MailSummary(itemID: "summary:\(items.first ?? ""):\(items.last ?? ""):\(items.count)",
                               subject: "\(items.count) new messages", senderName: "New mail")]
                : items.map { MailSummary(itemID: $0, subject: "", senderName: "New mail") }
            // One budget for both lookups together.
            var unread: Int?
            client.withDeadline(milliseconds: budget) {
                if !summarized, let ewsURL = row.ewsURL {
                    do {
                        let found = try client.messages(ewsURL: ewsURL, credentials: credentials, version: version, itemIDs: items, timeoutMilliseconds: budget)
                        summaries = summaries.map { generic in found.first { $0.itemID == generic.itemID } ?? generic }
                    } catch {
                        logger.warning("GetItem failed; sending generic alerts", metadata: ["record": "\(row.id)", "error": "\(error)"])
                    }
                }
                if devices.contains(where: \.device.badge), let ewsURL = row.ewsURL {
                    do {
                        unread = try client.inboxUnreadCount(ewsURL: ewsURL, credentials: credentials, version: version, timeoutMilliseconds: budget)
                    } catch {
                        logger.warning("GetFolder failed; no badge", metadata: ["record": "\(row.id)", "error": "\(error)"])
                    }
                }
            }

            let sender = SenderClient(socketPath: configuration.pushSocket)
            let policy = try context.policyClient()
            for target in devices {
                if let deviceID = target.device.ewsDeviceID, let policy {
                    switch policy.decision(deviceID: deviceID) {
                    case .allowed: break
                    case .denied:
                        logger.info("SEG policy denies the device; no push", metadata: ["device": "\(target.device.id)"])
                        continue
                    case .unreachable:
                        logger.warning("SEG policy service unreachable", metadata: ["device": "\(target.device.id)", "policy.on_error": "\(configuration.policyAllowOnError ? "allow" : "deny")"])
                        if !configuration.policyAllowOnError { continue }
                    }
                }
                for summary in summaries {
                    let payload = MailPayload(
                        sender: summary.senderName, subject: summary.subject, userID: row.userID,
                        badge: target.device.badge ? unread : nil, sound: target.device.defaultSound, syncKey: target.syncKey
                    )
                    let notification = PushNotification(
                        id: Hex.encode(Array(Digest.sha256("mail:\(row.id):\(target.device.id):\(summary.itemID)").prefix(16))),
                        deviceToken: target.token, topic: target.device.bundleID,
                        environment: target.device.development ? .sandbox : .production, pushType: .alert,
                        expiration: now.millisecondsSinceEpoch / 1000 + Int64(configuration.exchangeNotificationTTLSeconds),
                        payload: payload.encoded, deviceRowID: target.device.id
                    )
                    do {
                        switch try sender.submit(notification) {
                        case .accepted:
                            continue
                        case .refused(let reason) where reason == "bad-notification" || reason == "bad-frame":
                            // A notification ens-apns will never take: retrying cannot help.
                            logger.error("ens-apns refused a malformed notification", metadata: ["record": "\(row.id)", "reason": "\(reason)"])
                        case .refused(let reason):
                            // spool-full, io-error, busy: not acknowledged, so not ours to
                            // lose. Exchange redelivers the batch after a 503.
                            logger.error("ens-apns did not take a notification; Exchange will retry", metadata: ["record": "\(row.id)", "reason": "\(reason)"])
                            return Delivery(delivered: false, recorded: true)
                        }
                    } catch {
                        logger.error("ens-apns unreachable; Exchange will retry", metadata: ["record": "\(row.id)", "error": "\(error)"])
                        return Delivery(delivered: false, recorded: true)
                    }
                }
            }
            return Delivery(delivered: true, recorded: true)
        }
    }
}
