internal import Curl
public import ENSConfig
public import ENSHTTP
public import ENSModel
internal import ENSStore
internal import ENSVault
internal import Logging

/// /registerdevicev2 for a mailbox of a registered Dovecot server (docs/dovecot.md): the
/// device hands over the account's IMAP login and password (sealed, as for Exchange),
/// which ENS proves by logging in, and with the same login writes the account's opt-in,
/// a routing token, into its server-level METADATA. Then the password is forgotten:
/// the server's push plugin sends everything a notification needs, so nothing is kept.
public struct DovecotRegistrar: MailboxRegistering {
    public let backend = MailBackend.dovecot
    let settings: DovecotSettings

    public init(settings: DovecotSettings) {
        self.settings = settings
    }

    /// A user name and password for an address whose domain a registered server serves,
    /// or that name a server by its IMAP URL (`imapUrl`).
    public func serves(_ request: MailboxRequest, context: RequestContext) throws -> Bool {
        guard case .basic = request.credentials.method else { return false }
        if let url = request.credentials.serverURL?.lowercased() { return url.hasPrefix("imaps://") || url.hasPrefix("imap://") }
        return try server(serving: request.mailbox, context: context) != nil
    }

    public func subscribe(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        try context.inRegistrationPlace { try subscribeNow(request, context: context) }
    }

    /// A device joining a record whose live subscription is at the same server proves
    /// its password and writes the opt-in again (the record's current token); at another
    /// server, or none, it subscribes.
    public func proveAccess(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        try context.inRegistrationPlace {
            let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
            guard let state = try store.subscriptionState(recordID: request.record.id), state.isLive, state.backend == .dovecot,
                  let server = try server(for: request, context: context), state.endpoint == server.endpoint else {
                return try subscribeNow(request, context: context)
            }
            return try optIn(request, server: server, generation: state.generation, context: context) ?? .proven(endpoint: server.endpoint)
        }
    }

    private func subscribeNow(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        guard !settings.hookURL.isEmpty else {
            context.logger.error("dovecot.hook_url is not set; cannot subscribe Dovecot mailboxes")
            return .failed
        }
        guard let server = try server(for: request, context: context) else { return .endpointNotTrusted }
        let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        let now = Timestamp.now()
        guard let (generation, _) = try store.beginRegistration(recordID: request.record.id, now: now) else { return .failed }
        if let refused = try optIn(request, server: server, generation: generation, context: context) { return refused }
        // Dovecot sends no heartbeat: a week without mail has the devices register again
        // at their next check-in, which proves the password and writes the opt-in anew.
        let won = try store.completeRegistration(recordID: request.record.id, generation: generation, backend: .dovecot, backendURL: server.imapURL,
                                                 endpoint: server.endpoint, subscriptionID: server.name, watermark: nil, version: nil,
                                                 heartbeatMinutes: 7 * 24 * 60, now: now)
        context.logger.info(won ? "subscribed (dovecot)" : "subscribed (dovecot), but a later registration of the record won", metadata: [
            "record": "\(request.record.id)", "generation": "\(generation)", "dovecot.server": "\(server.name)",
        ])
        return .subscribed(endpoint: server.endpoint)
    }

    /// The registered server for this request: the one its `imapUrl` names, else the one
    /// serving the address's domain; nil when none (or the named one does not serve the
    /// address: no password goes to a server for an address it does not host).
    private func server(for request: MailboxRequest, context: RequestContext) throws -> DovecotServer? {
        let servers = DovecotServerStore(database: context.globalDatabase, vault: context.services.vault)
        guard let url = request.credentials.serverURL else { return try server(serving: request.mailbox, context: context) }
        let wanted = DovecotServer.normalizedIMAPURL(url)
        let named = try servers.all().first { $0.imapURL == wanted }
        guard let named, named.serves(address: request.mailbox) else {
            context.logger.warning("dovecot registration names an IMAP server that is not registered for the address",
                                   metadata: ["record": "\(request.record.id)"])
            return nil
        }
        return named
    }

    /// The registered server that serves `address`: the one listing its domain, else
    /// (with `dovecot.discovery`) the one its domain's own records name.
    private func server(serving address: String, context: RequestContext) throws -> DovecotServer? {
        let store = DovecotServerStore(database: context.globalDatabase, vault: context.services.vault)
        let servers = try store.all()
        guard !servers.isEmpty, let at = address.lastIndex(of: "@") else { return nil }
        if let listed = servers.first(where: { $0.serves(address: address) }) { return listed }
        guard settings.discovery else { return nil }
        let domain = String(address[address.index(after: at)...])
        return try context.dovecotDiscovery().server(forDomain: domain, among: servers, logger: context.logger)
    }

    /// Logs in as the account and writes the opt-in for `generation`; nil when done, else
    /// the outcome to answer. The login must be the address itself: a password proves
    /// only the account it logs into, and the record is the address's.
    private func optIn(_ request: MailboxRequest, server: DovecotServer, generation: Int64, context: RequestContext) throws -> MailboxOutcome? {
        guard case .basic(let login, let password) = request.credentials.method else { return .authenticationFailed }
        guard login.lowercased() == request.mailbox.lowercased() else {
            context.logger.warning("dovecot registration: the IMAP login is not the mailbox's address", metadata: ["record": "\(request.record.id)"])
            try request.recordProofFailure(context: context)
            return .authenticationFailed
        }
        guard try request.proofAllowed(context: context) else { return .throttled(retryAfter: context.settings.exchange.proofWindow) }
        let token = try DovecotRoute(recordID: request.record.id, generation: generation, bucket: context.urlBucket(userID: request.record.userID))
            .token(server: server.name, vault: context.services.vault)
        let key = server.driver.metadataKey
        let command = "SETMETADATA \"\" (\(key) \"\(server.driver.metadataValue(token: token))\")"
        do {
            let client = try IMAPClient(configuration: IMAPServerConfiguration(url: server.imapURL, caPEM: server.caPEM,
                                                                               totalTimeout: settings.imapTimeout))
            _ = try client.run(command, login: login, password: password)
        } catch {
            switch error.kind {
            case .loginDenied:
                context.logger.info("dovecot proof: the server refused the login",
                                    metadata: ["record": "\(request.record.id)", "dovecot.server": "\(server.name)"])
                try request.recordProofFailure(context: context)
                return .authenticationFailed
            case .commandRefused:
                context.logger.error("dovecot refused the opt-in: is METADATA enabled (imap_metadata, mail_attribute_dict)?", metadata: [
                    "dovecot.server": "\(server.name)", "error": "\(error)",
                ])
                return .failed
            default:
                context.logger.warning("dovecot server unreachable at registration",
                                       metadata: ["dovecot.server": "\(server.name)", "error": "\(error)"])
                return .failed
            }
        }
        try request.recordProofSuccess(context: context)
        return nil
    }

}
