internal import Codecs
internal import ENSConfig
internal import ENSHTTP
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import Logging
internal import OpenSSL

/// The push hook a registered Dovecot server calls on every delivery into an Inbox whose
/// account opted in (`PUT` from the ox driver, `POST` from ENS's Lua script, at
/// `dovecot.hook_url`). Two things make a push count: the server's credential (HTTP
/// Basic: its name and the secret `ens-cron dovecot config` printed), and the routing
/// token in the body, which opens only for the server it was issued for. Everything
/// else (no or a wrong credential, another server's token, a forged or stale token,
/// garbage) pushes nothing.
///
/// The answer comes once the sender holds the notifications durably, or at once when
/// there is nothing to push: Dovecot's delivery (LMTP) waits for it, so nothing here
/// waits on a push service. Dovecot keeps no queue: a push that fails is lost (the mail
/// is still delivered), so this hook never answers an error for flow control.
enum DovecotHook {
    static let pathPrefix = "/dovecot/"
    /// The hook's path: `dovecot.hook_url` plus the version of what it is sent.
    static let path = "/dovecot/v1"
    /// Dovecot sends From and Subject whole (a 110 KB Subject was seen): room for that,
    /// and a clear 413 past it.
    static let maximumBodyBytes = 256 * 1024

    static let route = Route(methods: ["PUT", "POST"], requiresAPIToken: false, body: .raw(limit: maximumBodyBytes), readsAuthorization: true,
                             bucket: { request, context in
                                 guard let (server, _) = basicCredentials(request.authorization),
                                       let event = try? DovecotEvent(body: request.body) else { return nil }
                                 return DovecotRoute(token: event.token, server: server, vault: context.services.vault)?.bucket
                             }) { request, context in
        try answer(request, context: context)
    }

    static let unauthorized: APIResponse = {
        var response = APIResponse.error(401, .unauthorized, "A registered Dovecot server's credential is required.")
        response.extraHeaders = [("WWW-Authenticate", "Basic realm=\"ENS Dovecot hook\"")]
        return response
    }()
    static let gone = APIResponse.error(410, .gone, "This routing token is not ENS's any more; clear the opt-in.")
    static let done = APIResponse(status: 204, body: [])
    /// 503 with Retry-After: the one answer on which Dovecot's driver tries once more.
    static let retrySoon: APIResponse = {
        var response = APIError.serviceUnavailable.response
        response.extraHeaders = [("Retry-After", "1")]
        return response
    }()

    static func answer(_ request: Request, context: RequestContext) throws -> APIResponse {
        guard request.path == path else { return APIError.notFound.response }
        guard let (name, secret) = basicCredentials(request.authorization),
              let server = try DovecotServerStore(database: context.globalDatabase, vault: context.services.vault).server(named: name),
              Digest.constantTimeEqual(Array(secret.utf8),
                                       Array(context.services.vault.dovecotCredential(server: name, serial: server.credentialSerial).utf8))
        else {
            context.logger.warning("dovecot push refused: no registered server's credential")
            return unauthorized
        }
        let event: DovecotEvent
        do {
            event = try DovecotEvent(body: request.body)
        } catch {
            context.logger.warning("dovecot push refused: not a push", metadata: ["dovecot.server": "\(name)", "reason": "\(error)"])
            return APIResponse.error(400, .invalidRequest, "The body is not a push_notification event: \(error)")
        }
        guard event.isNewMailInInbox else { return done }
        guard let route = DovecotRoute(token: event.token, server: name, vault: context.services.vault) else {
            context.logger.warning("dovecot push refused: the routing token is not one ENS issued for this server",
                                   metadata: ["dovecot.server": "\(name)"])
            return gone
        }
        return try deliver(event, route: route, server: server, context: context)
    }

    /// The record the token names, at the token's generation and this server, hears of
    /// the message unless it already has (the driver's retry): each message is claimed
    /// by its (UIDVALIDITY, UID) in `MailItemsSeen`, so pushes may arrive in any order.
    private static func deliver(_ event: DovecotEvent, route: DovecotRoute, server: DovecotServer, context: RequestContext) throws -> APIResponse {
        let logger = context.logger
        let record = "\(route.recordID)"
        let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
        let now = Timestamp.now()
        // The record and its devices in one read, whatever the answer turns out to be.
        let found = try store.callbackRecordAndDevices(id: route.recordID, now: now, limit: context.settings.deviceAPI.maximumDevicesPerRecord)
        guard let (row, devices) = found, row.backend == .dovecot, row.generation == route.generation, row.endpoint == server.endpoint else {
            if let row = found?.record, row.isRegistrationPending(generation: route.generation, now: now) {
                // The opt-in is written before the registration commits: mail in between
                // is not announced (the app syncs when it opens).
                logger.info("dovecot push for a registration not yet recorded: not pushed", metadata: ["record": "\(record)"])
                return done
            }
            logger.info("dovecot push for a superseded or deleted registration",
                        metadata: ["record": "\(record)", "dovecot.server": "\(server.name)"])
            return gone
        }
        guard row.isAuthentic(RowBinding(vault: context.services.vault)) else {
            logger.error("dovecot push refused: the subscription row fails its integrity check", metadata: ["record": "\(record)"])
            return APIError.internalError.response
        }
        if let userName = event.userName, Hex.encode(Digest.sha256(userName.lowercased())) != row.userID {
            logger.warning("dovecot push refused: the account is not the record's",
                           metadata: ["record": "\(record)", "dovecot.server": "\(server.name)"])
            return gone
        }
        guard !devices.isEmpty else {
            // Every device left (or its push token is dead): the opt-in outlived its
            // registration, and ENS's script clears it.
            logger.info("dovecot push for a record without devices", metadata: ["record": "\(record)"])
            return gone
        }
        // Claimed in one transaction with the hand-off: a retry of the same message (the
        // driver's second attempt, or the same delivery told twice) waits for the first
        // one's outcome and then finds it handed on; a failure claims nothing.
        let key = Array(Digest.sha256("dovecot:\(event.itemID)").prefix(16))
        do {
            let handed = try context.database.inTransaction { () throws -> Bool in
                guard !(try store.claimItems(recordID: row.id, keys: [key], now: now)).isEmpty else { return false }
                let outcome = try NewMailDelivery(context: context).deliver(
                    items: [event.itemID], row: row, notifiable: devices, reader: DovecotEventReader(event: event), store: store,
                    watermark: nil, now: now, lookupBudget: .zero
                )
                guard outcome.delivered else { throw HandOffDeclined() }
                // Heard from, for the check-ins' health (a capped batch reserved nothing).
                if !outcome.recorded { try store.recordCallback(recordID: row.id, generation: row.generation, watermark: nil, now: now) }
                return true
            }
            if !handed { logger.debug("dovecot push already delivered", metadata: ["record": "\(record)"]) }
        } catch is HandOffDeclined {
            // The sender could not take it: Dovecot tries once more after Retry-After.
            return retrySoon
        } catch let error as DatabaseError where error.isWriteConflict {
            // The same message still being handed on by another request.
            return retrySoon
        }
        logger.debug("dovecot push delivered", metadata: ["record": "\(record)"])
        return done
    }

    /// `Basic base64(name:secret)` with a valid server name; nil for anything else.
    static func basicCredentials(_ header: String?) -> (name: String, secret: String)? {
        guard let header, header.utf8.count <= 512, header.lowercased().hasPrefix("basic "),
              let decoded = Base64.decodeLenient(String(header.dropFirst(6)).trimmingCharacters(in: " ")),
              let text = String(validating: decoded, as: UTF8.self), let colon = text.firstIndex(of: ":") else { return nil }
        let name = String(text[..<colon])
        guard DovecotServer.isValidName(name) else { return nil }
        return (name, String(text[text.index(after: colon)...]))
    }
}

/// A hand-off the sender did not take: the transaction (and the claim) rolls back.
private struct HandOffDeclined: Error {}

/// The push itself says what a notification shows: nothing is looked up.
struct DovecotEventReader: MailboxReader {
    let event: DovecotEvent

    func lookUp(itemIDs: [String], unreadCount: Bool, budget: Duration, logger: Logger) -> MailLookup {
        MailLookup(summaries: itemIDs.contains(event.itemID) ? [MailSummary(itemID: event.itemID, subject: event.subject,
                                                                            senderName: event.senderName)] : [],
                   unreadCount: unreadCount ? event.unseen : nil)
    }
}
