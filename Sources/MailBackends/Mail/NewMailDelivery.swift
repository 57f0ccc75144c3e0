internal import ENSHTTP
internal import ENSConfig
internal import Codecs
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import SenderWire
internal import Logging
internal import OpenSSL
internal import POSIX

/// Hands one record's new mail to the sender, the same for every backend: the record's
/// notifiable devices, the per-callback and per-minute caps, the lookups (sender,
/// subject, unread count) within one budget, the SEG policy, then one notification per
/// device and message. Notification ids derive from record, device and item, so a
/// backend's redelivery collapses on the device.
struct NewMailDelivery {
    let context: RequestContext

    var logger: Logger { context.logger }

    /// What `deliver` did: whether the sender took every notification (else the
    /// caller answers 503), and whether the callback is already recorded as heard.
    struct Outcome {
        let delivered: Bool
        let recorded: Bool
    }

    /// Looks the items up (within `lookupBudget`; without a reader, every alert is
    /// generic) and hands one notification per (device, item) to the sender.
    /// `notifiable` are the record's devices as `MailSubscriptionStore` gives them
    /// (`notifiableDevices`, or read with the record).
    func deliver(items: [String], row: MailSubscriptionStore.CallbackRecord, notifiable: [MailSubscriptionStore.NotifiableDevice],
                 reader: (any MailboxReader)?, store: MailSubscriptionStore,
                 watermark: String?, now: Timestamp, lookupBudget: Duration) throws -> Outcome {
        let settings = context.settings.exchange
        // `blind` devices hear of new mail from their own rich subscription
        // (BlindNotifications); a record whose devices are all blind is not looked up.
        let devices = notifiable.filter { $0.device.privacy.blindThumbprint == nil }
        guard !devices.isEmpty else { return Outcome(delivered: true, recorded: false) }
        // Caps (docs/exchange.md, "Limits"): a batch of more items than
        // exchange.max_items_per_callback, or one that would take the record past
        // exchange.max_notifications_per_minute, becomes one "N new messages" alert
        // per device; past the rate cap even that, the batch is dropped and said so.
        let perItem = items.count <= settings.maximumItemsPerCallback
        // Sender and subject; if the server is slow or fails, a generic alert still
        // goes. The lookups come before the reservation: inside a backend's hand-off
        // transaction (Graph's) the reservation locks the record's row until the commit,
        // and a lookup made under that lock would hold every other notification of the
        // mailbox waiting for it. A record already at its per-minute cap is not looked up.
        let wanted = perItem ? items.count * devices.count : devices.count
        // The count read with the record: no round trip of its own.
        let worthLookingUp = perItem && row.notificationsLeft(limit: settings.maximumNotificationsPerMinute, now: now) >= wanted
        let lookup = reader?.lookUp(itemIDs: worthLookingUp ? items : [], unreadCount: devices.contains(where: \.device.badge),
                                    budget: lookupBudget, logger: logger) ?? MailLookup()
        // The SEG policy (an HTTP call each) before the reservation, which locks the
        // record's row until its commit.
        let policy = try context.policyClient()
        let allowOnError = context.settings.policy.allowOnError
        let permitted = devices.filter { target in
            guard let deviceID = target.device.ewsDeviceID, let policy else { return true }
            switch policy.decision(deviceID: deviceID) {
            case .allowed:
                return true
            case .denied:
                logger.info("SEG policy denies the device; no push", metadata: ["device": "\(target.device.id)"])
                return false
            case .unreachable:
                logger.warning("SEG policy service unreachable",
                               metadata: ["device": "\(target.device.id)", "policy.on_error": "\(allowOnError ? "allow" : "deny")"])
                return allowOnError
            }
        }
        // The reservation, then the rows with content, each its own commit (inside
        // Graph's hand-off transaction, part of it). One transaction would make them one
        // commit but four statements, and on this stack a statement costs MariaDB more
        // than a commit does (bench/b6-floor.py: 1.0 ms against 0.65 per callback).
        // A row with content is written before the push, so a `secure` device finds it
        // when the push arrives; every other row goes with its notification, and the
        // sender writes it in its next batch (PushNotification.logRow). A redelivered
        // batch finds its rows already there. A failure to log throws: Graph's hand-off
        // is retried whole; for EWS the callback is answered 500 and Exchange redelivers.
        guard let reserved = try store.reserveNotifications(
            recordID: row.id, preferring: wanted, orElse: devices.count,
            limit: settings.maximumNotificationsPerMinute, watermark: watermark, now: now
        ) else {
            logger.warning("notification rate cap reached for the record; this batch is not pushed", metadata: [
                "record": "\(row.id)", "items": "\(items.count)", "devices": "\(devices.count)",
            ])
            return Outcome(delivered: true, recorded: false)
        }
        let summarized = !perItem || reserved < items.count * devices.count
        let prepared = try notifications(for: permitted, items: items, summarized: summarized, lookup: lookup, row: row, now: now)
        try context.notificationLog.record(prepared.compactMap(\.loggedNow))
        let taken = try SenderHandOff(context: context).submit(prepared.map(\.notification), reserved: reserved, recordID: row.id, store: store)
        return Outcome(delivered: taken, recorded: true)
    }

    /// One notification per (device, message), and its log row: a row with content
    /// to log before the hand-off (`loggedNow`), any other inside the notification for
    /// the sender. Past a cap one "N new messages" alert per device. Notification ids
    /// derive from record, device and item, so a redelivery collapses on the device.
    private func notifications(for devices: [MailSubscriptionStore.NotifiableDevice], items: [String], summarized: Bool, lookup: MailLookup,
                               row: MailSubscriptionStore.CallbackRecord,
                               now: Timestamp) throws(DatabaseError) -> [(loggedNow: NotificationLog.Entry?, notification: PushNotification)] {
        if summarized {
            logger.info("new mail summarized: over a per-callback or per-minute cap", metadata: ["record": "\(row.id)", "items": "\(items.count)"])
        }
        // A summary's id is derived from the batch, so a redelivery of it collapses on
        // the device like any other.
        let summaries = summarized
            ? [MailSummary(itemID: "summary:\(items.first ?? ""):\(items.last ?? ""):\(items.count)",
                           subject: "\(items.count) new messages", senderName: "New mail")]
            : items.map { item in lookup.summaries.first { $0.itemID == item } ?? MailSummary(itemID: item, subject: "", senderName: "New mail") }
        let settings = context.settings.exchange
        let privacy = context.settings.privacy
        let log = context.notificationLog
        var prepared: [(loggedNow: NotificationLog.Entry?, notification: PushNotification)] = []
        for target in devices {
            let mode = target.device.privacy.mode.raised(to: privacy.minimumMode, hasPreviewKey: target.device.privacy.previewKey != nil)
            for summary in summaries {
                let id = Hex.encode(Array(Digest.sha256("mail:\(row.id):\(target.device.id):\(summary.itemID)").prefix(16)))
                let payload = MailPayload(
                    sender: summary.senderName, subject: summary.subject, userID: row.userID,
                    deviceTag: context.services.vault.pushTag(deviceID: target.device.id),
                    badge: target.device.badge ? lookup.unreadCount : nil, sound: target.device.defaultSound, syncKey: target.syncKey,
                    notificationID: id, createdAt: now, isSummary: summarized
                )
                let (encoded, shown) = render(payload, mode: mode, previewKey: target.device.privacy.previewKey)
                let summary = privacy.historyCount > 0 ? payload.summary : nil
                var notification = PushNotification(
                    id: id, deviceToken: target.token, topic: target.device.bundleID,
                    environment: target.device.development ? .sandbox : .production, pushType: .alert,
                    expiration: now.adding(settings.notificationTTL).millisecondsSinceEpoch / 1000,
                    payload: encoded, deviceRowID: target.device.id, shard: context.pushShard
                )
                guard shown != .secure else {
                    let entry = NotificationLog.Entry(notificationID: id, deviceID: target.device.id, createdAt: now, summary: summary,
                                                      content: payload.content, contentExpiresAt: now.adding(privacy.fetchTTL))
                    prepared.append((entry, notification))
                    continue
                }
                let sealed = try summary.map { summary throws(DatabaseError) in
                    try log.sealSummary(summary, notificationID: id, deviceID: target.device.id)
                }
                notification.logRow = PushNotification.LogRow(createdAtMilliseconds: now.millisecondsSinceEpoch, summarySealed: sealed)
                prepared.append((nil, notification))
            }
        }
        return prepared
    }

    /// The payload in the device's effective mode, and that mode. An `encrypted` device
    /// whose key cannot be used (or a sealing failure) gets `secure`: stricter, never
    /// weaker.
    private func render(_ payload: MailPayload, mode: PrivacyMode, previewKey: [UInt8]?) -> (payload: [UInt8], mode: PrivacyMode) {
        guard mode == .encrypted else { return (payload.encoded(mode), mode) }
        do {
            guard let previewKey else { throw PreviewEncryptionError.recipientKeyRefused(reason: "the device has no key stored") }
            return (try payload.encrypted(to: try PreviewEncryption.recipientKey(x963: previewKey)), .encrypted)
        } catch {
            logger.error("a preview could not be sealed to the device's key; sending it as secure", metadata: ["error": "\(error)"])
            return (payload.encoded(.secure), .secure)
        }
    }
}
