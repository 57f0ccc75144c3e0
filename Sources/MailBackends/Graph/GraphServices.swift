public import ENSHTTP
public import ENSConfig
public import Graph
internal import POSIX
internal import Curl

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
        let tenants = try configuration.graph.completeTenants()
        guard !tenants.isEmpty else { return nil }
        let limit = configuration.graph.maximumRequestsPerMailbox
        let slots: FileSlots
        do {
            slots = try FileSlots(directory: configuration.graph.slotDirectory, slots: limit)
        } catch {
            throw ConfigError(key: "graph.slot_dir",
                              problem: "cannot be used for the per-mailbox request limit (\(error)); every responder process must be able to " +
                                       "create and lock files there")
        }
        return GraphServices(applications: try GraphApplications(settings: tenants), mailboxes: MailboxGate(limit: limit, hostSlots: slots))
    }
}

extension GraphSettings {
    /// Where and how Graph and the identity platform are reached.
    public var client: GraphClientConfiguration {
        GraphClientConfiguration(graphURL: url, loginURL: loginURL, caBundlePath: caFile, timeout: timeout)
    }
}

extension SharedServices {
    /// The Graph tenants' applications, tokens and per-mailbox limits; nil when no
    /// tenant is configured.
    public var graph: GraphServices? { backends[GraphServices.self] }
}

/// What a Graph registration keeps on its thread while it runs: its one budget.
final class GraphRegistrationBudget {
    var deadline: Deadline?
}

extension RequestContext {
    /// This thread's Graph client (one libcurl handle; tokens shared by the process).
    func graphClient() throws -> GraphClient {
        try threadState(GraphClient.self) { try GraphClient(configuration: settings.graph.client,
                                                            tokens: services.graph?.tokens ?? GraphAppTokens()) }
    }

    /// The budget of the Graph registration under way on this thread, if any.
    var graphDeadline: Deadline? {
        get { threadState(GraphRegistrationBudget.self) { GraphRegistrationBudget() }.deadline }
        set { threadState(GraphRegistrationBudget.self) { GraphRegistrationBudget() }.deadline = newValue }
    }
}
