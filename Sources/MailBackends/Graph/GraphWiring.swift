public import ENSConfig
public import ENSVault
internal import Graph

/// Microsoft Graph: only where a tenant is configured.
public enum GraphWiring: MailBackendWiring {
    public static func registrar(_ configuration: ENSConfiguration, settings: ResponderSettings, graph: GraphServices?) -> (any MailboxRegistering)? {
        graph == nil ? nil : GraphRegistrar(settings: settings.graph)
    }

    public static func addRoutes(to router: inout Router) {
        router.add(prefix: GraphNotifications.pathPrefix, GraphNotifications.route)
    }

    public static func keeper(_ configuration: ENSConfiguration, vault: Vault) throws -> (any SubscriptionKeeping)? {
        let tenants = try configuration.completeGraphTenants()
        guard !tenants.isEmpty else { return nil }
        return GraphKeeper(
            applications: try GraphApplications(settings: tenants), client: GraphClientConfiguration(configuration),
            plan: GraphSubscriptionPlan(callbackURL: configuration.graphCallbackURL, lifetime: configuration.graphSubscriptionLifetime, vault: vault,
                                        bucketsInURLs: configuration.dbShardMap != nil)
        )
    }
}
