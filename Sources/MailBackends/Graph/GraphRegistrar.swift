public import ENSHTTP
internal import Curl
public import ENSConfig
public import ENSModel
internal import ENSStore
internal import ENSVault
internal import Graph
internal import Logging
internal import POSIX

/// /registerdevicev2 for a mailbox of a configured Graph tenant: the device hands over
/// a short-lived delegated access token (`graphAccessToken`), which proves the mailbox
/// is the signed-in user's (`GET /me`) and is then forgotten; ENS subscribes with its
/// own application token to that user's Inbox, or keeps the record's live subscription
/// for the same user. No user credential is kept anywhere (docs/graph.md).
public struct GraphRegistrar: MailboxRegistering {
    public let backend = MailBackend.graph
    let settings: GraphSettings
    /// One budget for a registration's Graph work (/me, then the subscription, whose
    /// creation waits for Graph to validate both notification URLs): exchange.registration_budget_ms.
    let registrationBudget: Duration

    public init(settings: GraphSettings, registrationBudget: Duration) {
        self.settings = settings
        self.registrationBudget = registrationBudget
    }

    /// A Graph token for a mailbox whose domain a configured tenant lists.
    public func serves(_ request: MailboxRequest, context: RequestContext) throws -> Bool {
        guard case .graph = request.credentials.method else { return false }
        return context.services.graph?.applications.application(serving: request.mailbox) != nil
    }

    public func subscribe(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        try withinLimits(context) { client throws in try subscribe(request, client: client, context: context) }
    }

    public func proveAccess(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        try withinLimits(context) { client throws in
            let store = GraphSubscriptionStore(database: context.database)
            guard let live = try store.mailbox(recordID: request.record.id),
                  let state = try MailSubscriptionStore(database: context.database,
                                                        vault: context.services.vault).subscriptionState(recordID: request.record.id),
                  state.isLive, state.backend == .graph else {
                return try subscribe(request, client: client, context: context)
            }
            switch try prove(request, client: client, context: context) {
            case .refused(let outcome): return outcome
            case .proven(let userPath, _):
                guard userPath == live.userPath else {
                    // The token opens a mailbox, but not the one this record watches.
                    context.logger.warning("graph proof: the token belongs to another user than the record's subscription",
                                           metadata: ["record": "\(request.record.id)"])
                    try request.recordProofFailure(context: context)
                    return .authenticationFailed
                }
                return .proven(endpoint: GraphSubscriptionStore.endpoint(tenantID: live.tenantID))
            }
        }
    }

    private func subscribe(_ request: MailboxRequest, client: GraphClient, context: RequestContext) throws -> MailboxOutcome {
        guard !settings.callbackURL.isEmpty else {
            context.logger.error("graph.callback_url is not set; cannot subscribe with Graph")
            return .failed
        }
        let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        let graphStore = GraphSubscriptionStore(database: context.database)
        guard let state = try store.subscriptionState(recordID: request.record.id) else { return .failed }
        let userPath: String
        let application: GraphApplication
        switch try prove(request, client: client, context: context) {
        case .refused(let outcome): return outcome
        case .proven(let path, let app):
            userPath = path
            application = app
        }
        // The record already watches this user's Inbox through Graph: nothing to create.
        if state.isLive, state.backend == .graph, state.backendURL == userPath,
           try graphStore.mailbox(recordID: request.record.id)?.tenantID == application.tenantID {
            context.logger.info("graph: the record's live subscription already watches this mailbox", metadata: ["record": "\(request.record.id)"])
            return .subscribed(endpoint: GraphSubscriptionStore.endpoint(tenantID: application.tenantID))
        }
        let now = Timestamp.now()
        guard let (generation, _) = try store.beginRegistration(recordID: request.record.id, now: now) else { return .failed }
        let plan = GraphSubscriptionPlan(callbackURL: settings.callbackURL, lifetime: settings.subscriptionLifetime, vault: context.services.vault,
                                         bucketsInURLs: context.bucketsInURLs)
        let subscription: GraphSubscription
        do {
            subscription = try plan.create(recordID: request.record.id, generation: generation, userID: request.record.userID, userPath: userPath,
                                           application: application,
                                           client: client, now: now, deadline: context.graphDeadline)
        } catch {
            // 403: the tenant's admin has not granted ENS this mailbox (RBAC scope);
            // a validation failure: Graph could not reach graph.callback_url.
            context.logger.warning("graph subscription failed", metadata: ["record": "\(request.record.id)", "error": "\(error)"])
            return .failed
        }
        let won = try graphStore.completeRegistration(recordID: request.record.id, generation: generation, tenantID: application.tenantID,
                                                      userPath: userPath, subscription: subscription.id, expiresAt: subscription.expiresAt, now: now,
                                                      binding: RowBinding(vault: context.services.vault))
        context.logger.info(won ? "subscribed (graph)" : "subscribed (graph), but a later registration of the record won", metadata: [
            "record": "\(request.record.id)", "generation": "\(generation)", "tenant": "\(application.name)",
        ])
        return .subscribed(endpoint: GraphSubscriptionStore.endpoint(tenantID: application.tenantID))
    }

    private enum Proof {
        case proven(userPath: String, application: GraphApplication)
        case refused(MailboxOutcome)
    }

    /// The token's user owns the mailbox, and a configured tenant serves it.
    private func prove(_ request: MailboxRequest, client: GraphClient, context: RequestContext) throws -> Proof {
        guard case .graph(let token) = request.credentials.method,
              let application = context.services.graph?.applications.application(serving: request.mailbox) else {
            return .refused(.authenticationFailed)
        }
        guard try request.proofAllowed(context: context) else { return .refused(.throttled(retryAfter: context.settings.exchange.proofWindow)) }
        let user: GraphUser
        do {
            user = try client.signedInUser(delegatedToken: token, deadline: context.graphDeadline)
        } catch .unauthorized(let status, let code) {
            context.logger.info("graph proof: the access token was refused", metadata: ["http.status": "\(status)", "graph.code": "\(code)"])
            try request.recordProofFailure(context: context)
            return .refused(.authenticationFailed)
        } catch {
            context.logger.warning("graph proof failed", metadata: ["error": "\(error)"])
            return .refused(.failed)
        }
        guard user.owns(mailbox: request.mailbox) else {
            context.logger.warning("graph proof: the token's user is not this mailbox", metadata: ["record": "\(request.record.id)"])
            try request.recordProofFailure(context: context)
            return .refused(.authenticationFailed)
        }
        try request.recordProofSuccess(context: context)
        return .proven(userPath: "users/\(user.id)", application: application)
    }

    /// A registration's Graph work holds one of this process's registration places and
    /// runs within one budget.
    private func withinLimits(_ context: RequestContext, _ body: (GraphClient) throws -> MailboxOutcome) throws -> MailboxOutcome {
        let client = try context.graphClient()
        return try context.inRegistrationPlace {
            context.graphDeadline = .after(registrationBudget)
            defer { context.graphDeadline = nil }
            return try body(client)
        }
    }
}

/// Sender and subject (`$select`) and the Inbox's unread count, with the tenant's
/// application token, within Graph's per-mailbox limits: a mailbox with no free slot,
/// or inside a Retry-After, gets generic alerts instead of a wait.
struct GraphMailboxReader: MailboxReader {
    let client: GraphClient
    let application: GraphApplication
    let userPath: String
    let gate: MailboxGate
    let recordID: Int64

    func lookUp(itemIDs: [String], unreadCount: Bool, budget: Duration, logger: Logger) -> MailLookup {
        var lookup = MailLookup()
        let deadline = Deadline.after(budget)
        let mailbox = application.tenantID + "/" + userPath
        func call<T>(_ what: String, _ body: () throws(GraphError) -> T) -> T? {
            do {
                let answer = try gate.withSlot(mailbox: mailbox,
                                               nowNanoseconds: MonotonicClock.nanoseconds()) { () throws(GraphError) -> T in try body() }
                if answer == nil { logger.info("graph: no free request slot for the mailbox; generic alert",
                                               metadata: ["record": "\(recordID)", "lookup": "\(what)"]) }
                return answer
            } catch .throttled(let retryAfter) {
                gate.block(mailbox: mailbox, for: retryAfter, nowNanoseconds: MonotonicClock.nanoseconds())
                logger.warning("graph throttled the mailbox; generic alerts until Retry-After",
                               metadata: ["record": "\(recordID)", "retry_after_s": "\(retryAfter.wholeSeconds)"])
            } catch .notFound {
                // Moved or deleted before we looked: a generic alert still goes.
                logger.info("graph: message no longer there; generic alert", metadata: ["record": "\(recordID)"])
            } catch {
                logger.warning("graph lookup failed; generic alert", metadata: ["record": "\(recordID)", "lookup": "\(what)", "error": "\(error)"])
            }
            return nil
        }
        for item in itemIDs {
            if let summary = call("message",
                { () throws(GraphError) in try client.summary(userPath: userPath, messageID: item, application: application, deadline: deadline) }) {
                lookup.summaries.append(summary)
            }
        }
        if unreadCount {
            lookup.unreadCount = call("unread",
                { () throws(GraphError) in try client.inboxUnreadCount(userPath: userPath, application: application, deadline: deadline) })
        }
        return lookup
    }
}
