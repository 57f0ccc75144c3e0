public import Graph
public import Curl
public import ENSModel
public import Logging
internal import POSIX
internal import OpenSSL
public import ENSStore
public import ENSVault
internal import ENSConfig

/// What makes a Graph subscription for a record: the notification URL (`graph.callback_url`
/// plus the record's routing token) and clientState of its generation, and the
/// lifetime asked for. Shared by registration and renewal, so a re-created
/// subscription is indistinguishable from the first.
public struct GraphSubscriptionPlan: Sendable {
    public let callbackURL: String
    public let lifetime: Duration
    public let vault: Vault
    /// Whether notification URLs name the user's bucket (a host with a shard map).
    public let bucketsInURLs: Bool

    public init(callbackURL: String, lifetime: Duration, vault: Vault, bucketsInURLs: Bool = false) {
        self.callbackURL = callbackURL
        self.lifetime = lifetime
        self.vault = vault
        self.bucketsInURLs = bucketsInURLs
    }

    /// The bucket a new URL for `userID`'s record names (nil: none, the forms before sharding).
    public func urlBucket(userID: String?) -> Int? {
        bucketsInURLs ? userID.flatMap(ShardMap.bucket(ofUserID:)) : nil
    }

    public func request(recordID: Int64, generation: Int64, userID: String? = nil, userPath: String, now: Timestamp) -> SubscriptionRequest {
        SubscriptionRequest(
            userPath: userPath,
            notificationURL: callbackURL + RoutingToken(recordID: recordID, generation: generation,
                                                        bucket: urlBucket(userID: userID)).path(vault: vault),
            clientState: vault.graphClientState(recordID: recordID, generation: generation),
            expiresAt: now.adding(lifetime)
        )
    }

    /// Creates the record's subscription; on 409 (one for the same Inbox exists: an
    /// earlier attempt that was created at Graph but not recorded here) reuses it if it
    /// carries this generation's clientState, else deletes it and creates anew.
    public func create(recordID: Int64, generation: Int64, userID: String? = nil,
                       userPath: String, application: GraphApplication, client: GraphClient,
                       now: Timestamp, deadline: Deadline? = nil) throws(GraphError) -> GraphSubscription {
        let wanted = request(recordID: recordID, generation: generation, userID: userID, userPath: userPath, now: now)
        do {
            return try client.createSubscription(wanted, application: application, deadline: deadline)
        } catch .conflict {
            let existing = try client.subscriptions(application: application, deadline: deadline)
                .first { $0.resource.lowercased() == wanted.resource.lowercased() }
            guard let existing else { throw .conflict }
            if let state = existing.clientState, Digest.constantTimeEqual(Array(state.utf8), Array(wanted.clientState.utf8)) {
                return try client.renewSubscription(id: existing.id, until: wanted.expiresAt, application: application, deadline: deadline)
            }
            try client.deleteSubscription(id: existing.id, application: application, deadline: deadline)
            return try client.createSubscription(wanted, application: application, deadline: deadline)
        }
    }
}

/// ens-cron's keeper of Graph subscriptions: renews each at about half its lifetime
/// (PATCH, which also reauthorizes; ENS never calls /reauthorize, so it can never
/// reauthorize and renew within ten minutes), re-creates one Graph no longer has (404,
/// or after `subscriptionRemoved`), and marks a record not subscribed when its tenant
/// no longer lets ENS in (consent or RBAC scope withdrawn, user gone) — whose devices
/// the renew job then wakes, as for a dead EWS subscription. Failures that may pass
/// (Graph down, throttled) are retried at the next runs until the subscription expires.
public struct GraphKeeper: SubscriptionKeeping {
    public let backend = MailBackend.graph
    let applications: GraphApplications
    let client: GraphClientConfiguration
    let tokens: GraphAppTokens
    let plan: GraphSubscriptionPlan

    public init(applications: GraphApplications, client: GraphClientConfiguration,
                tokens: GraphAppTokens = GraphAppTokens(), plan: GraphSubscriptionPlan) {
        self.applications = applications
        self.client = client
        self.tokens = tokens
        self.plan = plan
    }

    public struct Counts: Sendable, Equatable {
        public var renewed = 0
        public var recreated = 0
        public var postponed = 0
        public var ended = 0
    }

    /// What one keeping pass works with: ens-cron's run, or a responder's prompt renewal.
    struct Run {
        let database: Database
        let now: Timestamp
        let logger: Logger

        init(database: Database, now: Timestamp, logger: Logger) {
            self.database = database
            self.now = now
            self.logger = logger
        }

        init(_ maintenance: Maintenance) {
            self.init(database: maintenance.database, now: maintenance.now, logger: maintenance.logger)
        }
    }

    /// How long a prompt renewal holds its claim: if the responder fails or dies, the
    /// next ens-cron run after this takes it over.
    static let promptHold: Duration = .minutes(2)

    /// Renews (or re-creates) one record's subscription now, right after a lifecycle
    /// event, if it is due and no one else (another responder, host or ens-cron) has
    /// claimed it; runs after the event's 202 (`RequestContext.afterTheAnswer`).
    public func keepPromptly(recordID: Int64, generation: Int64, database: Database, logger: Logger) throws {
        let store = GraphSubscriptionStore(database: database)
        let now = Timestamp.now()
        guard let due = try store.claimDue(recordID: recordID, generation: generation, now: now, hold: Self.promptHold) else { return }
        let client = try GraphClient(configuration: client, tokens: tokens)
        var counts = Counts()
        try keep(due, client: client, store: store, run: Run(database: database, now: now, logger: logger), counts: &counts)
        logger.info("graph subscription kept at once after a lifecycle event", metadata: [
            "record": "\(recordID)", "renewed": "\(counts.renewed)", "recreated": "\(counts.recreated)", "ended": "\(counts.ended)",
        ])
    }

    /// The same for one rich (`blind`) subscription.
    public func keepBlindPromptly(blindID: Int64, database: Database, logger: Logger) throws {
        let now = Timestamp.now()
        let store = GraphBlindStore(database: database, vault: plan.vault)
        guard let blind = try store.claimDue(id: blindID, now: now, hold: Self.promptHold) else { return }
        let client = try GraphClient(configuration: client, tokens: tokens)
        try BlindKeeper(applications: applications, plan: plan).keep(blind, client: client, run: Run(database: database, now: now, logger: logger))
    }

    public func keep(_ maintenance: Maintenance) throws -> Int {
        let store = GraphSubscriptionStore(database: maintenance.database)
        let client = try GraphClient(configuration: client, tokens: tokens)
        var counts = Counts()
        var lastID: Int64 = 0
        while true {
            let due = try store.due(now: maintenance.now, after: lastID, limit: Maintenance.batchSize)
            for subscription in due {
                try keep(subscription, client: client, store: store, run: Run(maintenance), counts: &counts)
            }
            guard let last = due.last, due.count == Maintenance.batchSize else { break }
            lastID = last.recordID
        }
        maintenance.logger.info("graph subscriptions kept", metadata: [
            "renewed": "\(counts.renewed)", "recreated": "\(counts.recreated)", "postponed": "\(counts.postponed)", "ended": "\(counts.ended)",
        ])
        try BlindKeeper(applications: applications, plan: plan).keep(Run(maintenance), client: client)
        return counts.ended
    }

    private func keep(_ due: GraphSubscriptionStore.Due, client: GraphClient, store: GraphSubscriptionStore, run: Run, counts: inout Counts) throws {
        let now = run.now
        let record = "\(due.recordID)"
        guard due.isAuthentic(RowBinding(vault: plan.vault)) else {
            // Edited without the master key: renewing would subscribe whatever mailbox
            // the row now names for this record's devices. Left alone, and said loudly.
            run.logger.error("graph subscription row fails its integrity check: not renewed", metadata: ["record": "\(record)"])
            try store.postpone(recordID: due.recordID, generation: due.generation, until: now.adding(.minutes(60)))
            counts.postponed += 1
            return
        }
        guard let tenantID = due.tenantID, let userPath = due.userPath, let application = applications.application(tenantID: tenantID) else {
            run.logger.warning("graph subscription of a tenant no longer configured: not subscribed", metadata: ["record": "\(record)"])
            try end(due, store: run.database, counts: &counts)
            return
        }
        // A live subscription is never renewed twice within ten minutes; one Graph removed
        // (or that expired) is replaced at once.
        if (due.expiresAt ?? now) > now, let renewed = due.renewedAt, renewed > now.subtracting(GraphSubscriptionStore.renewalSpacing) {
            try store.postpone(recordID: due.recordID, generation: due.generation, until: renewed.adding(GraphSubscriptionStore.renewalSpacing))
            return
        }
        switch renewOrCreate(due, userPath: userPath, application: application, client: client, now: now, logger: run.logger) {
        case .success(let (subscription, recreated)):
            try store.renewed(recordID: due.recordID, generation: due.generation,
                              subscriptionID: subscription.id, expiresAt: subscription.expiresAt, now: now)
            if recreated { counts.recreated += 1 } else { counts.renewed += 1 }
        case .failure(.unauthorized(let status, let code)):
            run.logger.warning("graph refused the tenant's application for this mailbox: not subscribed", metadata: [
                "record": "\(record)", "http.status": "\(status)", "graph.code": "\(code)",
            ])
            try end(due, store: run.database, counts: &counts)
        case .failure(.notFound(let code)):
            run.logger.warning("graph has no such mailbox any more: not subscribed", metadata: ["record": "\(record)", "graph.code": "\(code)"])
            try end(due, store: run.database, counts: &counts)
        case .failure(let error):
            let retry: Duration = if case .throttled(let after) = error { max(after, .seconds(60)) } else { .minutes(5) }
            run.logger.warning("graph subscription renewal failed; retrying later", metadata: ["record": "\(record)", "error": "\(error)"])
            try store.postpone(recordID: due.recordID, generation: due.generation, until: now.adding(retry))
            counts.postponed += 1
        }
    }

    /// PATCH while Graph has the subscription, else (404, expired, removed) a new one.
    private func renewOrCreate(_ due: GraphSubscriptionStore.Due, userPath: String, application: GraphApplication, client: GraphClient,
                               now: Timestamp, logger: Logger) -> Result<(GraphSubscription, recreated: Bool), GraphError> {
        do throws(GraphError) {
            if let id = due.subscriptionID, (due.expiresAt ?? now) > now {
                do throws(GraphError) {
                    return .success((try client.renewSubscription(id: id, until: now.adding(plan.lifetime), application: application), false))
                } catch .notFound {
                    logger.info("graph subscription gone: creating a new one", metadata: ["record": "\(due.recordID)"])
                }
            }
            return .success((try plan.create(recordID: due.recordID, generation: due.generation,
                                             userID: due.userID, userPath: userPath, application: application,
                                             client: client, now: now), true))
        } catch {
            return .failure(error)
        }
    }

    private func end(_ due: GraphSubscriptionStore.Due, store database: Database, counts: inout Counts) throws {
        try MailSubscriptionStore(database: database, vault: plan.vault).markUnsubscribed(recordID: due.recordID, generation: due.generation)
        counts.ended += 1
    }
}
