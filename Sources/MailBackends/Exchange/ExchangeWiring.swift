public import ENSHTTP
internal import ENSModel
public import ENSConfig
public import ENSVault

/// Exchange Web Services: push subscriptions kept alive by their heartbeats.
public enum ExchangeWiring: MailBackendWiring {
    public static func registrar(_ configuration: ENSConfiguration, graph: GraphServices?) -> (any MailboxRegistering)? {
        ExchangeRegistrar(settings: configuration.exchange)
    }

    public static func addRoutes(to router: inout Router) {
        let ews = EWSNotifications()
        router.add(prefix: ews.pathPrefix, MailCallback.route(ews))
    }

    public static func keeper(_ configuration: ENSConfiguration, vault: Vault) throws -> (any SubscriptionKeeping)? {
        HeartbeatKeeper(backend: .ews)
    }
}
