public import ENSHTTP
public import ENSConfig
public import ENSVault
internal import Graph

/// Microsoft Graph: only where a tenant is configured.
public enum GraphWiring: MailBackendWiring {
    public static func registrar(_ configuration: ENSConfiguration, graph: GraphServices?) -> (any MailboxRegistering)? {
        graph == nil ? nil : GraphRegistrar(settings: configuration.graph, registrationBudget: configuration.exchange.registrationBudget)
    }

    public static func addRoutes(to router: inout Router) {
        router.add(prefix: GraphNotifications.pathPrefix, GraphNotifications.route)
    }

    public static func keeper(_ configuration: ENSConfiguration, vault: Vault) throws -> (any SubscriptionKeeping)? {
        let tenants = try configuration.graph.completeTenants()
        guard !tenants.isEmpty else { return nil }
        return GraphKeeper(
            applications: try GraphApplications(settings: tenants), client: configuration.graph.client,
            plan: GraphSubscriptionPlan(callbackURL: configuration.graph.callbackURL,
                                        lifetime: configuration.graph.subscriptionLifetime, vault: vault,
                                        bucketsInURLs: configuration.database.shardMapFile != nil)
        )
    }
}
