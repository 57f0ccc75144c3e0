public import ENSHTTP
public import ENSConfig
internal import ENSModel
public import ENSVault

/// One mail backend's parts, as the services wire them: its registrar (responders), its
/// callback route (the router) and its keeper (`ens-cron renew`). Each backend's folder
/// holds one; `MailBackendTable.all` lists them.
public protocol MailBackendWiring {
    /// Its registrar in a responder process; nil when the configuration leaves it out
    /// (Graph without a tenant).
    static func registrar(_ configuration: ENSConfiguration, graph: GraphServices?) -> (any MailboxRegistering)?
    /// Adds its callback location(s) to the router.
    static func addRoutes(to router: inout Router)
    /// Its keeper for `ens-cron renew`; nil when the configuration leaves it out.
    static func keeper(_ configuration: ENSConfiguration, vault: Vault) throws -> (any SubscriptionKeeping)?
}

/// Every mail backend this build has. Adding one is a folder of `MailBackends` with a
/// `MailBackendWiring`, and one line here. Order matters for registrations: a mailbox
/// goes to the first backend whose registrar serves it, and the last one takes what no
/// other serves.
public enum MailBackendTable {
    public static var all: [any MailBackendWiring.Type] {
        [
            GraphWiring.self,     // the domains of a configured Entra tenant
            DovecotWiring.self,   // the domains of a registered Dovecot server, or an imapUrl
            ExchangeWiring.self,  // everything else: Autodiscover or the device's ewsUrl
        ]
    }

    /// The registrars of a responder process, in the table's order.
    public static func registrars(_ configuration: ENSConfiguration, graph: GraphServices?) -> MailRegistrars {
        let registrars = all.compactMap { $0.registrar(configuration, graph: graph) }
        guard let fallback = registrars.last else {
            preconditionFailure("MailBackendTable: the last backend (the fallback) must always have a registrar")
        }
        return MailRegistrars(fallback: fallback, preferring: Array(registrars.dropLast()))
    }

    /// Every backend's callback locations.
    public static func addRoutes(to router: inout Router) {
        for backend in all { backend.addRoutes(to: &router) }
    }

    /// The keepers `ens-cron renew` runs.
    public static func keepers(_ configuration: ENSConfiguration, vault: Vault) throws -> [any SubscriptionKeeping] {
        try all.compactMap { try $0.keeper(configuration, vault: vault) }
    }
}
