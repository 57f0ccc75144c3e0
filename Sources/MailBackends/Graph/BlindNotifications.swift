internal import ENSHTTP
internal import ENSConfig
internal import Curl
internal import ENSMetrics
internal import Codecs
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import Graph
internal import Logging
internal import OpenSSL
internal import SenderWire

/// The identity platform's signing keys as one responder process knows them, behind
/// the copy every process and host shares in the database (`GraphSigningKeys`). A
/// token signed by a key none of them knows makes one of them fetch the JWKS again,
/// at most once a minute in all; ens-cron fetches it on every run, so responders
/// rarely do.
public final class SigningKeyCache: Sendable {
    private let keys = SynchronizedBox<[String: RSAVerifyingKey]>([:])
    public static let fetchSpacing: Duration = .seconds(60)

    public init() {}

    func key(_ kid: String) -> RSAVerifyingKey? {
        keys.withLock { $0[kid] }
    }

    /// Replaces this process's keys with the database's.
    func load(_ store: GraphBlindStore) throws {
        var loaded: [String: RSAVerifyingKey] = [:]
        for key in try store.signingKeys() {
            loaded[key.kid] = try? RSAVerifyingKey(modulus: key.modulus, exponent: key.exponent)
        }
        keys.withLock { $0 = loaded }
    }

    /// Fetches the JWKS if no one did within `fetchSpacing`, stores it for everyone and
    /// loads it. False when another fetch was too recent; throws when the platform
    /// cannot be reached.
    static func fetch(client: GraphClient, store: GraphBlindStore, deadline: Deadline?, now: Timestamp) throws -> Bool {
        guard try store.claimKeyFetch(now: now, spacing: fetchSpacing) else { return false }
        let fetched = try client.identityPlatformKeys(deadline: deadline)
        try store.replaceSigningKeys(fetched.map { GraphBlindStore.SigningKey(kid: $0.kid, modulus: $0.modulus, exponent: $0.exponent) }, now: now)
        return true
    }
}

/// Graph's `blind` mode, notification side: a rich subscription's new-mail items, whose
/// `encryptedContent` only the device can open, go to the devices registered with its
/// certificate once the batch's validation tokens prove Graph sent it. No Graph request,
/// no lookup: ENS forwards the ciphertext and the message id.
struct BlindNotifications {
    let context: RequestContext

    var logger: Logger { context.logger }

    func count(_ outcome: String, _ amount: Int = 1) {
        context.requestCounters?.countMailEvent(backend: GraphNotifications.backendLabel, outcome: outcome, amount)
    }

    /// Whether the batch's validation tokens speak for `tenants` (the tenants of its
    /// rich items): `.valid`, `.invalid` (nothing of the batch's rich items is
    /// delivered), or `.unavailable` when the signing keys cannot be fetched (the
    /// answer is 503 and Graph delivers the batch again).
    enum Verdict: Equatable {
        case valid
        case invalid(ValidationTokenError)
        case unavailable
    }

    func verify(_ batch: ChangeNotificationBatch, tenants: Set<String>) throws -> Verdict {
        guard let services = context.services.graph else { return .invalid(.noTokenForTenant) }
        guard let tokens = batch.validationTokens, !tokens.isEmpty else { return .invalid(.missing) }
        guard !batch.hasUnusableToken else { return .invalid(.malformed("a token is null or not text")) }
        let expectations = services.applications.all.map { ValidationTokens.Expectation(tenantID: $0.tenantID, clientID: $0.clientID) }
        let loginURL = context.settings.graph.client.loginURL
        let check = { () throws(ValidationTokenError) in
            try ValidationTokens(tokens).verify(expecting: expectations, required: tenants, key: services.signingKeys.key, loginURL: loginURL,
                                                now: Timestamp.now().millisecondsSinceEpoch / 1000)
        }
        do {
            try check()
            return .valid
        } catch .unknownKey {
            // Another process or ens-cron may have fetched it; else fetch it ourselves.
            let store = GraphBlindStore(database: context.database, vault: context.services.vault)
            try services.signingKeys.load(store)
            if (try? check()) != nil { return .valid }
            do {
                if try SigningKeyCache.fetch(client: try context.graphClient(), store: store,
                                             deadline: .after(context.settings.graph.lookupBudget), now: .now()) {
                    try services.signingKeys.load(store)
                    logger.info("graph signing keys fetched: a validation token named a key not known here")
                }
            } catch let error as GraphError {
                logger.error("graph signing keys could not be fetched; Graph will retry the batch", metadata: ["error": "\(error)"])
                return .unavailable
            }
            do {
                try check()
                return .valid
            } catch {
                return .invalid(error)
            }
        } catch {
            return .invalid(error)
        }
    }

    /// One rich subscription's genuine new-mail items: claimed (Graph delivers at least
    /// once) and handed to the sender in one transaction, as the lookup path does.
    /// False when the sender did not take them all (the caller answers 503).
    func deliver(_ items: [(messageID: String, content: EncryptedContent)], blind: GraphBlindStore.BlindSubscription,
                 row: MailSubscriptionStore.CallbackRecord, now: Timestamp) throws -> Bool {
        let accepted = items.filter { blind.encrypts(to: $0.content.certificateID) }
        if accepted.count < items.count {
            // Encrypted to a certificate this subscription never had (or no longer has).
            logger.warning("blind notification items dropped: encrypted to an unknown certificate", metadata: [
                "record": "\(row.id)", "blind": "\(blind.id)", "items": "\(items.count - accepted.count)",
            ])
            count("dropped_certificate", items.count - accepted.count)
        }
        guard !accepted.isEmpty else { return true }
        let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        let keys = accepted.map { Array(Digest.sha256("graph-blind:\(blind.id):\($0.messageID)").prefix(16)) }
        var duplicates = 0
        let handed: Int
        do {
            handed = try context.database.inTransaction { () throws -> Int in
                let claimed: [[UInt8]]
                do {
                    claimed = try store.claimItems(recordID: row.id, keys: keys, now: now)
                } catch let error as DatabaseError where error.isWriteConflict {
                    throw Declined.stillBeingHandedOn
                }
                let fresh = zip(accepted, keys).filter { claimed.contains($0.1) }.map(\.0)
                duplicates = accepted.count - fresh.count
                guard !fresh.isEmpty else { return 0 }
                guard try handOn(fresh, blind: blind, row: row, store: store, now: now) else { throw Declined.senderDidNotTake }
                return fresh.count
            }
        } catch let declined as Declined {
            if declined == .stillBeingHandedOn {
                logger.info("blind notification items still being handed on by another request; Graph will retry", metadata: ["record": "\(row.id)"])
                count("in_flight", accepted.count)
            }
            return false
        }
        count("duplicate", duplicates)
        count("delivered_blind", handed)
        return true
    }

    private enum Declined: Error { case stillBeingHandedOn, senderDidNotTake }

    /// One push per (device, item) to the devices registered with this subscription's
    /// certificate (or, after a rotation, its previous one), within the record's
    /// per-minute cap; past the cap one generic alert per device.
    private func handOn(_ items: [(messageID: String, content: EncryptedContent)], blind: GraphBlindStore.BlindSubscription,
                        row: MailSubscriptionStore.CallbackRecord, store: MailSubscriptionStore, now: Timestamp) throws -> Bool {
        let settings = context.settings.exchange
        let devices = try store.notifiableDevices(recordID: row.id, endpoint: row.endpoint, now: now,
                                                  limit: context.settings.deviceAPI.maximumDevicesPerRecord)
            .filter { target in target.device.privacy.blindThumbprint.map { blind.thumbprints.contains($0) } ?? false }
        guard !devices.isEmpty else { return true }
        let wanted = items.count * devices.count
        guard let reserved = try store.reserveNotifications(recordID: row.id, preferring: wanted, orElse: devices.count,
                                                            limit: settings.maximumNotificationsPerMinute, watermark: nil, now: now) else {
            logger.warning("notification rate cap reached for the record; this batch is not pushed",
                           metadata: ["record": "\(row.id)", "items": "\(items.count)"])
            return true
        }
        // Over the cap: one alert per device that names no message.
        let perItem = reserved >= wanted
        let fetchTTL = context.settings.privacy.fetchTTL
        var fetched: [NotificationLog.Entry] = []
        var notifications: [PushNotification] = []
        for target in devices {
            let messages: [(messageID: String, content: EncryptedContent?)] = perItem
                ? items.map { ($0.messageID, $0.content) }
                : [("summary:\(items.first?.messageID ?? ""):\(items.count)", nil)]
            for message in messages {
                let id = Hex.encode(Array(Digest.sha256("mail:\(row.id):\(target.device.id):\(message.messageID)").prefix(16)))
                let payload = MailPayload(sender: "", subject: "", userID: row.userID,
                                          deviceTag: context.services.vault.pushTag(deviceID: target.device.id),
                                          sound: target.device.defaultSound, notificationID: id, createdAt: now, isSummary: !perItem)
                let object = message.content.map(Self.blindObject)
                let fits = object.map(payload.fitsBlind) ?? true
                // Too big for a push: the device fetches it (/getnotification), as in `secure`.
                // Nothing else is logged: a blind notification has no sender or subject for
                // the history, so one that fits costs no write.
                if !fits, let object {
                    fetched.append(NotificationLog.Entry(notificationID: id, deviceID: target.device.id, createdAt: now, summary: nil,
                                                         content: object, contentExpiresAt: now.adding(fetchTTL)))
                }
                notifications.append(PushNotification(
                    id: id, deviceToken: target.token, topic: target.device.bundleID,
                    environment: target.device.development ? .sandbox : .production, pushType: .alert,
                    expiration: now.adding(settings.notificationTTL).millisecondsSinceEpoch / 1000,
                    payload: payload.blind(fits ? object : nil), deviceRowID: target.device.id, shard: context.pushShard
                ))
            }
        }
        try context.notificationLog.record(fetched)
        return try SenderHandOff(context: context).submit(notifications, reserved: reserved, recordID: row.id, store: store)
    }

    /// `ens.blind`: Graph's encryptedContent members as Graph named them (docs/api.md,
    /// "blind"). Not Graph's message id: Exchange Online derives it from the mailbox,
    /// so Apple or Google could link the pushes of one mailbox's devices by it; the
    /// device finds it inside the ciphertext.
    static func blindObject(_ content: EncryptedContent) -> [UInt8] {
        var object = JSONObjectWriter()
        object.add("data", content.data)
        object.add("dataKey", content.dataKey)
        object.add("dataSignature", content.dataSignature)
        object.add("encryptionCertificateId", content.certificateID)
        object.add("encryptionCertificateThumbprint", content.certificateThumbprint)
        return object.finished()
    }
}
