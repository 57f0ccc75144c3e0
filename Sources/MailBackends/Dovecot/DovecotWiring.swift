public import ENSConfig
public import ENSHTTP
public import ENSVault

/// Dovecot's push_notification plugin (IMAP hosting; docs/dovecot.md). Registered servers
/// live in the database (`ens-cron dovecot add`); a registration for an address none of
/// them serves goes on to the next backend.
public enum DovecotWiring: MailBackendWiring {
    public static func registrar(_ configuration: ENSConfiguration, graph: GraphServices?) -> (any MailboxRegistering)? {
        DovecotRegistrar(settings: configuration.dovecot)
    }

    public static func addRoutes(to router: inout Router) {
        router.add(prefix: DovecotHook.pathPrefix, DovecotHook.route)
    }

    /// Nothing to renew: an opt-in lasts until it is cleared.
    public static func keeper(_ configuration: ENSConfiguration, vault: Vault) throws -> (any SubscriptionKeeping)? {
        nil
    }
}
