public import ENSHTTP
internal import ENSConfig
internal import ENSMetrics
internal import Codecs
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import Graph
internal import Logging
internal import OpenSSL

/// Microsoft Graph's change notifications: POSTs to `/graph/r2.<sealed route>` (older
/// subscriptions: `/graph/<record>/<generation>/<mac>`), the notification (and
/// lifecycle) URL a subscription was created with.
///
/// Graph's rules (docs/graph.md, research/graph.md §2–3) shape every answer:
/// - A validation request (`?validationToken=`) is answered once the URL has
///   authenticated (`RoutingToken`), before the body is looked at: 200, text/plain, the
///   decoded token. On a URL that fails, it is dropped like any other post: 202, no echo.
/// - Graph-shaped traffic never gets a 4xx: Graph backs off from an endpoint that
///   refuses, and an attacker learns nothing from a 202. Items that are not genuine
///   (unknown subscription, wrong clientState, unreadable) are dropped and counted.
/// - Each new-mail item is handed to the sender (which acknowledges only once it is on
///   disk) before the answer, 202. If the sender cannot take it, the answer is 503 and
///   Graph delivers the batch again; the items already handed on are remembered
///   (`MailItemsSeen`, committed with the hand-off), so a redelivery or a duplicate is
///   not pushed twice, and one that arrives while another request is still handing the
///   item on waits for that outcome.
/// - Lifecycle events: `reauthorizationRequired` and `subscriptionRemoved` make the
///   renewal due, and the responder that heard the event renews (or re-creates) the
///   subscription right after its 202, if it wins the claim (`claimDue`; ens-cron's
///   next run otherwise); `missed` becomes one generic new-mail alert per device.
public enum GraphNotifications {
    public static let pathPrefix = "/graph/"
    /// Graph's batches are small; this leaves room for many items.
    static let maximumBodyBytes = 4 << 20
    static let backendLabel = "graph"

    public static let route = Route(methods: ["POST"], requiresAPIToken: false, body: .raw(limit: maximumBodyBytes), bucket: { request, context in
        RoutingToken(path: String(request.path.dropFirst(pathPrefix.count)), vault: context.services.vault)?.bucket
    }) { request, context in
        let counters = context.requestCounters
        // The URL first, even for a validation request: echoing the token for any
        // /graph/ path would let anyone have this host "validate" a URL ENS never made
        // (and tell a forged path from a real one by nothing, which is the point).
        guard let address = RoutingToken(path: String(request.path.dropFirst(pathPrefix.count)), vault: context.services.vault) else {
            context.logger.warning("graph notification dropped: URL failed authentication")
            counters?.countMailEvent(backend: backendLabel, outcome: "dropped_url")
            return accepted
        }
        if let token = validationToken(in: request.query) {
            return APIResponse(status: 200, body: Array(token.utf8), contentType: "text/plain; charset=utf-8")
        }
        let batch: ChangeNotificationBatch
        do {
            batch = try ChangeNotificationBatch(json: request.body)
        } catch {
            context.logger.warning("graph notification dropped: not a notification batch",
                                   metadata: ["record": "\(address.recordID)", "reason": "\(error)"])
            counters?.countMailEvent(backend: backendLabel, outcome: "dropped_unreadable")
            return accepted
        }
        counters?.countMailEvent(backend: backendLabel, outcome: "dropped_unreadable", batch.unreadable)
        return try Handler(address: address, context: context).respond(to: batch)
    }

    static let accepted = APIResponse(status: 202, body: [], contentType: "text/plain; charset=utf-8")
    static let retryLater = APIResponse.error(503, .serviceUnavailable, "The service is temporarily unavailable; retry later.")

    /// The decoded `validationToken` of a query string, if it has one (at most 4 KiB).
    static func validationToken(in query: String) -> String? {
        guard !query.isEmpty, query.utf8.count <= 12 * 1024, query.contains("validationToken="),
              let fields = try? FormDecoder.decode(Array(query.utf8)), let token = fields["validationToken"],
              token.utf8.count <= 4096 else { return nil }
        return token
    }

    /// One batch's work after its URL authenticated.
    private struct Handler {
        let address: RoutingToken
        let context: RequestContext

        var logger: Logger { context.logger }

        func count(_ outcome: String, _ amount: Int = 1) {
            context.requestCounters?.countMailEvent(backend: GraphNotifications.backendLabel, outcome: outcome, amount)
        }

        func respond(to batch: ChangeNotificationBatch) throws -> APIResponse {
            let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
            let graphStore = GraphSubscriptionStore(database: context.database)
            // Items by subscription, in the order Graph sent them.
            var order: [String] = []
            var items: [String: [ChangeNotificationBatch.Item]] = [:]
            var verdicts: [String: BlindNotifications.Verdict] = [:]
            if let blindID = address.blindID {
                return try respondForBlind(batch, blindID: blindID, store: store, verdicts: &verdicts)
            }
            for item in batch.items {
                let subscription = item.subscriptionID
                if items[subscription] == nil { order.append(subscription) }
                items[subscription, default: []].append(item)
            }
            for subscription in order {
                let group = items[subscription] ?? []
                let found = try store.callbackRecord(subscriptionID: subscription, backend: .graph)
                // A rich subscription on a URL of the record's form (none are made so now).
                if found == nil, let blind = try GraphBlindStore(database: context.database,
                                                                 vault: context.services.vault).subscription(subscriptionID: subscription) {
                    guard let row = try store.callbackRecord(id: blind.recordID) else {
                        count("dropped_unknown_subscription", group.count)
                        continue
                    }
                    guard try handleBlind(group, blind: blind, row: row, batch: batch,
                                          verdicts: &verdicts) else { return GraphNotifications.retryLater }
                    continue
                }
                guard let row = found else {
                    if try registrationPending(store) {
                        // Created at Graph, not yet recorded here: Graph retries the batch.
                        logger.info("graph notification for a registration not yet recorded: asking for a retry",
                                    metadata: ["record": "\(address.recordID)"])
                        return GraphNotifications.retryLater
                    }
                    logger.info("graph notification dropped: no record has this subscription", metadata: ["record": "\(address.recordID)"])
                    count("dropped_unknown_subscription", group.count)
                    continue
                }
                guard row.isAuthentic(RowBinding(vault: context.services.vault)) else {
                    // Tenant or user path edited without the master key: nothing is read
                    // from Graph for it, nothing is pushed.
                    logger.error("graph notification dropped: the subscription row fails its integrity check", metadata: ["record": "\(row.id)"])
                    count("dropped_integrity", group.count)
                    continue
                }
                let expected = Array(context.services.vault.graphClientState(recordID: row.id, generation: row.generation).utf8)
                var genuine: [ChangeNotificationBatch.Item] = []
                for item in group {
                    // Constant time per item: the clientState is the only proof that Graph sent it.
                    if let state = item.clientState, Digest.constantTimeEqual(Array(state.utf8), expected) { genuine.append(item) }
                }
                if genuine.count < group.count {
                    logger.warning("graph notification items dropped: clientState does not match", metadata: [
                        "record": "\(row.id)", "items": "\(group.count - genuine.count)",
                    ])
                    count("dropped_client_state", group.count - genuine.count)
                }
                guard try handle(genuine, subscription: subscription, row: row, store: store, graphStore: graphStore) else {
                    return GraphNotifications.retryLater
                }
            }
            return GraphNotifications.accepted
        }

        /// A POST to a rich subscription's own URL: the subscription and its record in one
        /// query; items of any other subscription are dropped.
        private func respondForBlind(_ batch: ChangeNotificationBatch, blindID: Int64, store: MailSubscriptionStore,
                                     verdicts: inout [String: BlindNotifications.Verdict]) throws -> APIResponse {
            guard let (row,
                       blind) = try store.blindCallback(blindID: blindID), row.id == address.recordID, let subscription = blind.subscriptionID else {
                logger.info("graph notification dropped: no blind subscription has this URL", metadata: ["record": "\(address.recordID)"])
                count("dropped_unknown_subscription", batch.items.count)
                return GraphNotifications.accepted
            }
            let group = batch.items.filter { $0.subscriptionID == subscription }
            if group.count < batch.items.count {
                count("dropped_unknown_subscription", batch.items.count - group.count)
            }
            guard try handleBlind(group, blind: blind, row: row, batch: batch, verdicts: &verdicts) else { return GraphNotifications.retryLater }
            return GraphNotifications.accepted
        }

        /// A rich (`blind`) subscription's items; false when the caller must answer 503.
        private func handleBlind(_ group: [ChangeNotificationBatch.Item], blind: GraphBlindStore.BlindSubscription,
                                 row: MailSubscriptionStore.CallbackRecord, batch: ChangeNotificationBatch,
                                 verdicts: inout [String: BlindNotifications.Verdict]) throws -> Bool {
            guard row.backend == .graph, let tenant = row.backendTenant, row.isAuthentic(RowBinding(vault: context.services.vault)) else {
                logger.error("blind notification dropped: its record is gone, not Graph's, or fails its integrity check",
                             metadata: ["blind": "\(blind.id)"])
                count("dropped_integrity", group.count)
                return true
            }
            let expected = Array(context.services.vault.graphBlindClientState(recordID: row.id, blindID: blind.id).utf8)
            let genuine = group.filter { item in item.clientState.map { Digest.constantTimeEqual(Array($0.utf8), expected) } ?? false }
            if genuine.count < group.count {
                logger.warning("graph notification items dropped: clientState does not match", metadata: [
                    "record": "\(row.id)", "items": "\(group.count - genuine.count)",
                ])
                count("dropped_client_state", group.count - genuine.count)
            }
            let now = Timestamp.now()
            var messages: [(messageID: String, content: EncryptedContent)] = []
            for item in genuine {
                switch item {
                case .encrypted(_, _, let messageID, let content):
                    if !messages.contains(where: { $0.messageID == messageID }) { messages.append((messageID, content)) }
                case .created:
                    // A rich subscription's item must carry its ciphertext; ENS has no other way to say what it is.
                    count("dropped_unencrypted")
                case .lifecycle(_, _, let event):
                    try BlindLifecycle(context: context).handle(event, blind: blind, row: row, now: now)
                    count("lifecycle_" + item.eventName)
                }
            }
            guard !messages.isEmpty else { return true }
            let blindNotifications = BlindNotifications(context: context)
            let verdict = try verdicts[tenant] ?? blindNotifications.verify(batch, tenants: [tenant])
            verdicts[tenant] = verdict
            switch verdict {
            case .valid:
                return try blindNotifications.deliver(messages, blind: blind, row: row, now: now)
            case .invalid(let error):
                logger.warning("blind notification items dropped: the batch's validation tokens do not prove Graph sent it", metadata: [
                    "record": "\(row.id)", "reason": "\(error)", "items": "\(messages.count)",
                ])
                count("dropped_validation", messages.count)
                return true
            case .unavailable:
                return false
            }
        }

        /// Whether the URL's record has a registration between its subscription's
        /// creation and its commit, at the URL's generation.
        private func registrationPending(_ store: MailSubscriptionStore) throws -> Bool {
            try store.callbackRecord(id: address.recordID)?.isRegistrationPending(generation: address.generation, now: .now()) ?? false
        }

        /// One subscription's genuine items; false when the sender did not take them all
        /// (the caller answers 503).
        private func handle(_ items: [ChangeNotificationBatch.Item], subscription: String, row: MailSubscriptionStore.CallbackRecord,
                            store: MailSubscriptionStore, graphStore: GraphSubscriptionStore) throws -> Bool {
            let now = Timestamp.now()
            var messages: [String] = []
            var missed = false
            for item in items {
                switch item {
                case .created(_, _, let messageID), .encrypted(_, _, let messageID, _):
                    if !messages.contains(messageID) { messages.append(messageID) }
                case .lifecycle(_, _, .reauthorizationRequired):
                    let due = try graphStore.requestRenewal(recordID: row.id, generation: row.generation, now: now)
                    let inSeconds = due.map { max(0, ($0.millisecondsSinceEpoch - now.millisecondsSinceEpoch) / 1000) }
                    logger.info("graph lifecycle event: renewal scheduled", metadata: [
                        "record": "\(row.id)", "event": "\(item.eventName)", "due_in_seconds": "\(inSeconds.map(String.init) ?? "unknown")",
                    ])
                    count("lifecycle_" + item.eventName)
                    context.keepGraphSubscriptionAfterTheAnswer(recordID: row.id, generation: row.generation)
                case .lifecycle(_, _, .subscriptionRemoved):
                    logger.info("graph lifecycle event: new subscription scheduled", metadata: ["record": "\(row.id)", "event": "\(item.eventName)"])
                    try graphStore.subscriptionRemoved(recordID: row.id, generation: row.generation, now: now)
                    count("lifecycle_" + item.eventName)
                    context.keepGraphSubscriptionAfterTheAnswer(recordID: row.id, generation: row.generation)
                case .lifecycle(_, _, .missed):
                    missed = true
                    count("lifecycle_missed")
                }
            }
            if !messages.isEmpty {
                guard try deliver(messages, keyedBy: { "graph-item:\(subscription):\($0)" }, row: row, store: store, graphStore: graphStore, now: now,
                                  reader: try reader(for: row)) else { return false }
            }
            if missed {
                // Some notifications never came: one generic alert per device, at most one per minute.
                let marker = "missed:\(subscription):\(now.millisecondsSinceEpoch / 60_000)"
                guard try deliver([marker], keyedBy: { $0 }, row: row, store: store,
                                  graphStore: graphStore, now: now, reader: nil) else { return false }
            }
            return true
        }

        /// Hands the items not handed on before to the sender, in one transaction with
        /// their claims and the record's push reservation: it commits only once the
        /// sender has taken them, so a redelivery meanwhile waits for the outcome, and a
        /// failure (or a responder that dies) leaves nothing claimed. False when the
        /// caller must answer 503.
        private func deliver(_ items: [String], keyedBy key: (String) -> String, row: MailSubscriptionStore.CallbackRecord,
                             store: MailSubscriptionStore, graphStore: GraphSubscriptionStore,
                             now: Timestamp, reader: (any MailboxReader)?) throws -> Bool {
            let keys = items.map { Array(Digest.sha256(key($0)).prefix(16)) }
            let delivery = NewMailDelivery(context: context)
            var duplicates = 0
            let handed: Int
            do {
                handed = try context.database.inTransaction { () throws -> Int in
                    let claimed: [[UInt8]]
                    do {
                        claimed = try store.claimItems(recordID: row.id, keys: keys, now: now)
                    } catch let error as DatabaseError where error.isWriteConflict {
                        throw HandOffDeclined.stillBeingHandedOn
                    }
                    let fresh = zip(items, keys).filter { pair in claimed.contains(pair.1) }.map(\.0)
                    duplicates = items.count - fresh.count
                    guard !fresh.isEmpty else { return 0 }
                    let outcome = try context.services.callbackGate.ifAvailable { () throws -> NewMailDelivery.Outcome in
                        try delivery.deliver(items: fresh, row: row, notifiable: try store.notifiableDevices(
                                                 recordID: row.id, endpoint: row.endpoint, now: now,
                                                 limit: context.settings.deviceAPI.maximumDevicesPerRecord),
                                             reader: reader, store: store, watermark: nil, now: now,
                                             lookupBudget: context.settings.graph.lookupBudget)
                    }
                    guard let outcome else { throw HandOffDeclined.atCapacity }
                    guard outcome.delivered else { throw HandOffDeclined.senderDidNotTake }
                    return fresh.count
                }
            } catch let declined as HandOffDeclined {
                switch declined {
                case .stillBeingHandedOn:
                    // Graph gave up on an attempt (3 s) and sent it again while the first
                    // request is still handing it on, and that one may yet fail.
                    logger.info("graph notification items still being handed on by another request; Graph will retry",
                                metadata: ["record": "\(row.id)"])
                    count("in_flight", items.count)
                case .atCapacity:
                    logger.warning("graph lookups at capacity; Graph will retry", metadata: ["record": "\(row.id)"])
                case .senderDidNotTake:
                    break  // NewMailDelivery said why
                }
                return false
            }
            count("duplicate", duplicates)
            count("delivered", handed)
            return true
        }

        /// Why a hand-off was rolled back (claims and reservation with it).
        private enum HandOffDeclined: Error {
            case stillBeingHandedOn, atCapacity, senderDidNotTake
        }

        private func reader(for row: MailSubscriptionStore.CallbackRecord) throws -> (any MailboxReader)? {
            guard let services = context.services.graph, let tenantID = row.backendTenant, let userPath = row.backendURL,
                  let application = services.applications.application(tenantID: tenantID) else {
                logger.warning("graph notification for a tenant no longer configured: generic alerts", metadata: ["record": "\(row.id)"])
                return nil
            }
            return GraphMailboxReader(client: try context.graphClient(), application: application, userPath: userPath,
                                      gate: services.mailboxes, recordID: row.id)
        }
    }
}

extension ChangeNotificationBatch.Item {
    /// The lifecycle event's name (for logs and metrics), "created" for new mail.
    var eventName: String {
        switch self {
        case .created, .encrypted: "created"
        case .lifecycle(_, _, let event): event.rawValue
        }
    }
}
