internal import ENSHTTP
internal import ENSConfig
internal import POSIX
internal import Codecs
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import Graph
internal import Logging
internal import OpenSSL

/// ens-cron's share of Graph's `blind` mode: renews each rich subscription before its
/// day runs out (Graph caps them at 1,440 minutes), re-creates one Graph removed or let
/// expire, deletes one no device uses any more, and keeps the identity platform's
/// signing keys fresh in the database so that responders rarely fetch them.
struct BlindKeeper {
    let applications: GraphApplications
    let plan: GraphSubscriptionPlan

    /// The keys are fetched by ens-cron at most this often (Microsoft rotates them about
    /// daily and publishes new ones ahead of use).
    static let keyRefresh: Duration = .minutes(60)

    struct Counts: Sendable, Equatable {
        var renewed = 0
        var recreated = 0
        var deleted = 0
        var postponed = 0
    }

    func keep(_ run: GraphKeeper.Run, client: GraphClient) throws {
        let store = GraphBlindStore(database: run.database, vault: plan.vault)
        let now = run.now
        do {
            if try store.claimKeyFetch(now: now, spacing: Self.keyRefresh) {
                let keys = try client.identityPlatformKeys()
                try store.replaceSigningKeys(keys.map { GraphBlindStore.SigningKey(kid: $0.kid, modulus: $0.modulus, exponent: $0.exponent) },
                                             now: now)
                run.logger.info("graph signing keys refreshed", metadata: ["keys": "\(keys.count)"])
            }
        } catch let error as GraphError {
            run.logger.warning("graph signing keys could not be refreshed", metadata: ["error": "\(error)"])
        }
        var counts = Counts()
        var lastID: Int64 = 0
        while true {
            let due = try store.due(now: now, after: lastID, limit: Maintenance.batchSize)
            for blind in due {
                try keep(blind, store: store, client: client, run: run, counts: &counts)
            }
            guard let last = due.last, due.count == Maintenance.batchSize else { break }
            lastID = last.id
        }
        if counts != Counts() {
            run.logger.info("graph blind subscriptions kept", metadata: [
                "renewed": "\(counts.renewed)", "recreated": "\(counts.recreated)",
                "deleted": "\(counts.deleted)", "postponed": "\(counts.postponed)",
            ])
        }
    }

    /// One rich subscription, kept at once (after a lifecycle event).
    func keep(_ blind: GraphBlindStore.BlindSubscription, client: GraphClient, run: GraphKeeper.Run) throws {
        var counts = Counts()
        try keep(blind, store: GraphBlindStore(database: run.database, vault: plan.vault), client: client, run: run, counts: &counts)
        run.logger.info("graph blind subscription kept at once after a lifecycle event", metadata: [
            "record": "\(blind.recordID)", "blind": "\(blind.id)", "renewed": "\(counts.renewed)", "recreated": "\(counts.recreated)",
        ])
    }

    private func keep(_ blind: GraphBlindStore.BlindSubscription, store: GraphBlindStore, client: GraphClient, run: GraphKeeper.Run,
                      counts: inout Counts) throws {
        let now = run.now
        let records = MailSubscriptionStore(database: run.database, vault: plan.vault)
        let record = try records.callbackRecord(id: blind.recordID)
        let mailbox = try GraphSubscriptionStore(database: run.database).mailbox(recordID: blind.recordID)
        let application = mailbox.flatMap { applications.application(tenantID: $0.tenantID) }
        let inUse = try blind.thumbprints.contains { try store.deviceCount(recordID: blind.recordID, thumbprint: $0) > 0 }
        guard let record, let mailbox, let application, record.backend == .graph, inUse,
              record.isAuthentic(RowBinding(vault: plan.vault)) else {
            // No device left for this certificate, or no Graph mailbox behind it.
            if let id = blind.subscriptionID, let application {
                try? client.deleteSubscription(id: id, application: application)
            }
            try store.delete(id: blind.id)
            counts.deleted += 1
            return
        }
        let alive = blind.subscriptionID != nil && (blind.expiresAt ?? now) > now
        if alive, let renewed = blind.renewedAt, renewed > now.subtracting(GraphSubscriptionStore.renewalSpacing) {
            try store.postpone(id: blind.id, until: renewed.adding(GraphSubscriptionStore.renewalSpacing))
            return
        }
        /// Records what Graph made or renewed on the row and counts it under `counter`;
        /// a store that fails is logged with `failure` and counted as postponed (false).
        func recorded(_ subscription: GraphSubscription, as counter: WritableKeyPath<Counts, Int>, or failure: Logger.Message) -> Bool {
            do {
                try store.subscribed(id: blind.id, subscriptionID: subscription.id, expiresAt: subscription.expiresAt, now: now)
                counts[keyPath: counter] += 1
                return true
            } catch {
                run.logger.error(failure, metadata: ["record": "\(blind.recordID)", "error": "\(error)"])
                counts.postponed += 1
                return false
            }
        }
        let lifetime = min(plan.lifetime, BlindSubscriptions.richLifetime)
        let notificationURL = plan.callbackURL + (try RoutingToken(recordID: blind.recordID, blindID: blind.id,
                                                                   bucket: plan.urlBucket(userID: record.userID))
            .blindPath(vault: plan.vault))
        do throws(GraphError) {
            if alive, let id = blind.subscriptionID {
                do throws(GraphError) {
                    let renewed = try client.renewSubscription(id: id, until: now.adding(lifetime), application: application)
                    // Not recorded, the row keeps its older expiry and is renewed again at
                    // the next run, which Graph allows.
                    _ = recorded(renewed, as: \.renewed, or: "graph blind subscription renewed but not recorded; renewing again next run")
                    return
                } catch .notFound {
                    run.logger.info("graph blind subscription gone: creating a new one", metadata: ["record": "\(blind.recordID)"])
                }
            }
            let request = SubscriptionRequest(
                userPath: mailbox.userPath,
                notificationURL: notificationURL,
                clientState: plan.vault.graphBlindClientState(recordID: blind.recordID, blindID: blind.id), expiresAt: now.adding(lifetime),
                encryption: RichNotifications(selected: BlindSubscriptions.selection(of: blind.resource), certificate: blind.certificate,
                                              certificateID: blind.certificateID)
            )
            let created = try client.createSubscription(request, application: application)
            // Not recorded, the row does not name it, so what Graph posts for it would be
            // dropped while it lives: deleted at Graph again; the row stays due and is
            // created anew at the next run.
            if !recorded(created, as: \.recreated, or: "graph blind subscription created but not recorded; deleting it at Graph") {
                do throws(GraphError) {
                    try client.deleteSubscription(id: created.id, application: application)
                } catch {
                    run.logger.warning("graph blind subscription not deleted; it lapses at its expiry", metadata: [
                        "record": "\(blind.recordID)", "error": "\(error)",
                    ])
                }
            }
        } catch {
            let retry: Duration = if case .throttled(let after) = error { max(after, .seconds(60)) } else { .minutes(5) }
            run.logger.warning("graph blind subscription renewal failed; retrying later",
                               metadata: ["record": "\(blind.recordID)", "error": "\(error)"])
            try store.postpone(id: blind.id, until: now.adding(retry))
            counts.postponed += 1
        }
    }
}

/// Lifecycle events of a rich subscription: `reauthorizationRequired` and
/// `subscriptionRemoved` make it due, and this responder renews or re-creates it right
/// after its 202 (ens-cron's next run if that fails).
struct BlindLifecycle {
    let context: RequestContext

    func handle(_ event: ChangeNotificationBatch.LifecycleEvent, blind: GraphBlindStore.BlindSubscription, row: MailSubscriptionStore.CallbackRecord,
                now: Timestamp) throws {
        switch event {
        case .reauthorizationRequired, .subscriptionRemoved:
            let store = GraphBlindStore(database: context.database, vault: context.services.vault)
            if event == .subscriptionRemoved { try store.removed(id: blind.id, now: now) } else { try store.renewNow(id: blind.id, now: now) }
            context.keepBlindSubscriptionAfterTheAnswer(blindID: blind.id)
            context.logger.info("graph lifecycle event on a blind subscription: renewal scheduled", metadata: [
                "record": "\(row.id)", "blind": "\(blind.id)", "event": "\(event.rawValue)",
            ])
        case .missed:
            context.logger.warning("graph missed notifications of a blind subscription", metadata: ["record": "\(row.id)", "blind": "\(blind.id)"])
        }
    }
}

extension RequestContext {
    /// A keeper for this responder's prompt renewals, as ens-cron's keeper is set up.
    var graphKeeper: GraphKeeper? {
        guard let graph = services.graph else { return nil }
        let graphSettings = settings.graph
        return GraphKeeper(applications: graph.applications, client: graphSettings.client, tokens: graph.tokens,
                           plan: GraphSubscriptionPlan(callbackURL: graphSettings.callbackURL, lifetime: graphSettings.subscriptionLifetime,
                                                       vault: services.vault, bucketsInURLs: bucketsInURLs))
    }

    /// After the lifecycle event's 202: the record's subscription renewed or re-created
    /// at once (Graph pauses a subscription that waits for its reauthorization, and a
    /// removed one hears nothing until it exists again), by this host if it wins the claim.
    func keepGraphSubscriptionAfterTheAnswer(recordID: Int64, generation: Int64) {
        guard let keeper = graphKeeper else { return }
        // The request's shard, taken now: the closure runs after the answer.
        let database = database
        afterTheAnswer { [self] in try keeper.keepPromptly(recordID: recordID, generation: generation, database: database, logger: logger) }
    }

    func keepBlindSubscriptionAfterTheAnswer(blindID: Int64) {
        guard let keeper = graphKeeper else { return }
        let database = database
        afterTheAnswer { [self] in try keeper.keepBlindPromptly(blindID: blindID, database: database, logger: logger) }
    }
}
