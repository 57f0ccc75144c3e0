public import ENSConfig
public import Graph
internal import POSIX

/// How the Graph backend registers mailboxes and reads them (the graph.* keys).
public struct GraphSettings: Sendable {
    public var client: GraphClientConfiguration
    /// The public https URL of the notification location, ending in /graph/.
    public var callbackURL: String
    /// The lifetime asked for new subscriptions.
    public var subscriptionLifetime: Duration
    /// One budget for a notification's lookups.
    public var lookupBudget: Duration
    /// One budget for a registration's Graph work (/me, then the subscription, whose
    /// creation waits for Graph to validate both notification URLs).
    public var registrationBudget: Duration

    public init(client: GraphClientConfiguration = GraphClientConfiguration(), callbackURL: String = "", subscriptionLifetime: Duration = .seconds(4200 * 60),
                lookupBudget: Duration = .milliseconds(1500), registrationBudget: Duration = .seconds(20)) {
        self.client = client
        self.callbackURL = callbackURL
        self.subscriptionLifetime = subscriptionLifetime
        self.lookupBudget = lookupBudget
        self.registrationBudget = registrationBudget
    }

    public init(_ configuration: ENSConfiguration) {
        self.init(
            client: GraphClientConfiguration(configuration),
            callbackURL: configuration.graphCallbackURL, subscriptionLifetime: configuration.graphSubscriptionLifetime,
            lookupBudget: configuration.graphLookupBudget, registrationBudget: configuration.exchangeRegistrationBudget
        )
    }
}

/// What the threads of one responder process share for Graph: the tenants' applications,
/// their tokens, and the per-mailbox request limits.
public final class GraphServices: Sendable {
    public let applications: GraphApplications
    public let tokens: GraphAppTokens
    public let mailboxes: MailboxGate
    /// The identity platform's keys that sign rich notifications' validation tokens.
    public let signingKeys: SigningKeyCache

    public init(applications: GraphApplications, tokens: GraphAppTokens = GraphAppTokens(), mailboxes: MailboxGate,
                signingKeys: SigningKeyCache = SigningKeyCache()) {
        self.applications = applications
        self.tokens = tokens
        self.mailboxes = mailboxes
        self.signingKeys = signingKeys
    }

    /// Graph's per-mailbox limit for every responder process of the host, kept in lock
    /// files under `graph.slot_dir`; nil when no tenant is configured.
    public static func responder(_ configuration: ENSConfiguration) throws -> GraphServices? {
        let tenants = try configuration.completeGraphTenants()
        guard !tenants.isEmpty else { return nil }
        let limit = configuration.graphMaximumRequestsPerMailbox
        let slots: FileSlots
        do {
            slots = try FileSlots(directory: configuration.graphSlotDirectory, slots: limit)
        } catch {
            throw ConfigError(key: "graph.slot_dir", problem: "cannot be used for the per-mailbox request limit (\(error)); every responder process must be able to create and lock files there")
        }
        return GraphServices(applications: try GraphApplications(settings: tenants), mailboxes: MailboxGate(limit: limit, hostSlots: slots))
    }
}

extension GraphClientConfiguration {
    /// The graph.* keys.
    public init(_ configuration: ENSConfiguration) {
        self.init(graphURL: configuration.graphURL, loginURL: configuration.graphLoginURL, caBundlePath: configuration.graphCAFile,
                  timeout: configuration.graphTimeout)
    }
}
