internal import ENSHTTP
internal import Codecs
internal import Curl
internal import ENSConfig
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import POSIX
internal import Logging
internal import OpenSSL
internal import MailBackends

/// The device API endpoints (see docs/api.md). Each handler resolves the user, opens
/// its sealed parameters with the user's key, and answers one of the contract's codes.
enum DeviceAPI {
    static func store(_ context: RequestContext) -> SubscriptionStore {
        SubscriptionStore(database: context.database, vault: context.services.vault, keyCache: context.services.privateKeys,
                          liveness: context.services.liveness, maximumDevices: context.settings.deviceAPI.maximumDevicesPerRecord,
                          shard: context.shard)
    }

    /// The opener of a sealed parameter of `record`'s, for `use`: bound values of a
    /// single-use use are marked used in the record's shard as they open.
    static func opener(_ store: SubscriptionStore, record: UserRecord, use: SealedUse, maximumBlocks: Int = SealedParameter.maximumBlocksSmall,
                       context: RequestContext) throws -> SealedPayload {
        let once = SealedOnce(recordID: record.id, vault: context.services.vault, register: SealedValuesUsed(database: context.database),
                              logger: context.logger)
        return SealedPayload(key: try store.privateKey(of: record), maximumBlocks: maximumBlocks, use: use, settings: context.settings.deviceAPI,
                             once: once)
    }

    /// The header of `/getpublickey`'s answer naming the sealed forms beside the
    /// chunked one that this host opens.
    static let sealingHeader = "ENS-Sealing"

    /// Every device API request is about the user its userid (or email) names, whose
    /// bucket picks the shard. A request whose identity is invalid goes to shard 0 and is
    /// refused there by the handler, which reads the same parameters.
    static let userBucket: Route.Bucket = { request, _ in
        (try? Identity.userID(request.parameters)).flatMap(ShardMap.bucket(ofUserID:))
    }

    // MARK: /getpublickey

    static let getPublicKey = Route(methods: ["POST"], requiresAPIToken: true, bucket: userBucket) { request, context in
        // The original contract's clients send `userid` alone as well as with `email`;
        // neither is stored (the userid is the address's hash).
        let userID = try Identity.userID(request.parameters)
        let store = store(context)
        let record: UserRecord
        if let existing = try store.record(userID: userID) {
            record = existing
        } else {
            // A new record: within the token's hourly quota, with a key from the pool.
            // Generating one here would cost a request thread ~0.1-0.7 s of CPU, which
            // a flood of new addresses would turn into an outage.
            let tokenHash = Digest.sha256(request.apiToken ?? "")
            // The quota and the key pool are shard 0's: they belong to no user.
            let global = SubscriptionStore(database: context.globalDatabase, vault: context.services.vault)
            guard try global.takeRecordQuota(tokenHash: tokenHash, limit: context.settings.deviceAPI.recordsPerTokenPerHour, now: .now()) else {
                context.logger.warning("record creation quota reached for an API token")
                var refused = APIResponse.error(429, .tooManyRequests, "Too many new users for this application; retry later.")
                refused.extraHeaders = [("Retry-After", "3600")]
                return refused
            }
            // From here on, a refusal or a failure makes no record: the count goes back.
            func giveQuotaBack() {
                do {
                    try global.returnRecordQuota(tokenHash: tokenHash)
                } catch {
                    context.logger.warning("cannot give back a record creation's quota", metadata: ["error": "\(error)"])
                }
            }
            let pooled: (publicKeyPEM: String, key: RSAPrivateKey)?
            do {
                pooled = try KeyPool(database: context.globalDatabase, vault: context.services.vault).take()
            } catch {
                giveQuotaBack()
                throw error
            }
            guard let pooled else {
                context.logger.error("key pool empty: refusing new users until `ens-cron keys` refills it")
                try global.returnRecordQuota(tokenHash: tokenHash)
                var unavailable = APIError.serviceUnavailable.response
                unavailable.extraHeaders = [("Retry-After", "60")]
                return unavailable
            }
            do {
                record = try store.createRecord(userID: userID, publicKeyPEM: pooled.publicKeyPEM, key: pooled.key)
            } catch {
                giveQuotaBack()
                throw error
            }
        }
        let code: ResponseCode = record.isSubscribed ? .userAlreadySubscribed : .userRecordPresentNotSubscribed
        var answer = APIResponse.ok(code, [("pubKey", try store.publicKeyPEM(of: record)), ("userid", record.userID)])
        // The sealed forms this host opens beside the chunked one (docs/api.md, "Sealed
        // parameters"): a client seals envelopes once a key's answer says so.
        answer.extraHeaders = [(Self.sealingHeader, SealedParameter.envelopeForm)]
        return answer
    }

    // MARK: /registerdevicev2

    static let registerDevice = Route(methods: ["POST"], requiresAPIToken: true, bucket: userBucket) { request, context in
        let parameters = request.parameters
        let userID = try Identity.userID(parameters)
        let sealedCreds = try parameters.required("creds")
        let bundleID = try parameters.required("bundleid")
        let force = try parameters.integer("force") == 1
        let exchangeVersion = try parameters.integer("exchVersion")
        let store = store(context)
        guard let own = try store.record(userID: userID) else { return .ok(.userSubscriptionNotFound) }

        let opened = try opener(store, record: own, use: .registrationCreds, maximumBlocks: SealedParameter.maximumBlocks, context: context)
            .opened(sealedCreds)
        let creds = opened.members
        let token = try creds.sealedToken("apnsToken")
        let credentials = try exchangeCredentials(creds)
        // The device as the user's records know it already: on its own record, or on a
        // claim (a subscription at a server the device proved itself at, beside the record).
        let tokenHash = context.services.vault.tokenHash(token)
        let (holder, existing): (UserRecord, DeviceRecord?)
        if let onOwn = try store.device(recordID: own.id, token: token) {
            (holder, existing) = (own, onOwn)
        } else if let (claim, onClaim) = try store.claimHolding(userID: userID, tokenHash: tokenHash) {
            (holder, existing) = (claim, onClaim)
        } else {
            (holder, existing) = (own, nil)
        }
        var record = holder
        // A device that is there already changes only as its owner says: with its secret
        // inside this (bound, so single-use) creds, when it registered one.
        if let existing {
            try DeviceSecret.authorise(existing, by: opened, operation: "registerdevicev2", context: context)
        }
        let requested = try PrivateNotifications.registrationPrivacy(parameters, creds: opened, existing: existing, logger: context.logger)
        let privacy = requested?.0
        let blindCertificate = requested?.1
        if blindCertificate != nil {
            // Only Graph can encrypt a new mail to the device's certificate.
            guard case .graph = credentials.method else {
                throw APIError(400, .invalidRequest, "Privacy 'blind' is for Exchange Online mailboxes (registered with graphAccessToken).",
                               refusal: "notExchangeOnline")
            }
        }
        let secret = try DeviceSecret.sent(in: creds)
        let settings = DeviceSettings(
            bundleID: bundleID, defaultSound: nonEmpty(parameters["defaultSound"]), ewsDeviceID: nonEmpty(parameters["ewsDeviceId"]),
            badge: request.badge, development: request.development, privacy: privacy ?? existing?.privacy,
            secretHash: secret.map(context.services.vault.deviceSecretHash) ?? existing?.secretHash
        )
        // A registration that chose a mode hears the one its pushes will use.
        let privacyAnswer = privacy.map { [("privacy", PrivateNotifications.effective($0, context: context).name)] } ?? []
        /// What a registered device hears besides its code: its mode, and the tag its
        /// private pushes name it by (`ens.tag`).
        func answer(_ code: ResponseCode) throws -> APIResponse {
            let tag = try store.device(recordID: record.id, token: token).map { [("pushTag", context.services.vault.pushTag(deviceID: $0.id))] } ?? []
            return .ok(code, privacyAnswer + tag)
        }
        guard let mailbox = mailboxAddress(parameters["email"], credentials: credentials, userID: userID) else {
            throw APIError.invalidRequest("Parameter 'email' is required: the mailbox the credentials must open.")
        }
        let presenter = ProofPresenter(tokenHash: tokenHash, remoteAddress: request.clientAddress,
                                       userName: credentials.userName)
        let request = MailboxRequest(record: record, mailbox: mailbox, credentials: credentials,
                                     protocolVersion: exchangeVersion, presenter: presenter)
        // A device joins a subscribed record only by proving, at that record's mail
        // server, that its credentials open the mailbox; `force` subscribes anew, and
        // the live subscription stays until the new one exists.
        let backends = context.services.mailBackends
        func register(_ request: MailboxRequest) throws -> MailboxOutcome {
            if request.record.isSubscribed && !force, let registrar = backends.registrar(of: request.record.backend) {
                return try registrar.proveAccess(request, context: context)
            }
            guard let registrar = try backends.registrar(serving: request, context: context) else { return .busy }
            return try registrar.subscribe(request, context: context)
        }
        var outcome = try register(request)
        if case .ownServer(let endpoint) = outcome {
            // Proven at its own server, which nothing confirms: a claim there, the device's
            // own subscription (one per server and user), which it joins or subscribes.
            record = try store.claim(of: own, endpoint: endpoint)
            outcome = try register(MailboxRequest(record: record, mailbox: mailbox, credentials: credentials, protocolVersion: exchangeVersion,
                                                  presenter: presenter))
            precondition(outcome != .ownServer(endpoint: endpoint), "a claim's own server is its live subscription's, or it has none")
            // Registered there, it leaves the record it was on.
            if outcome.isSuccess, holder.id != record.id, try store.device(recordID: holder.id, token: token) != nil {
                try store.unregister(recordID: holder.id, token: token)
            }
        }
        if let blindCertificate, outcome.isSuccess {
            let previous = existing?.privacy.blindThumbprint
            if let refusal = try PrivateNotifications.prepareBlind(blindCertificate, recordID: record.id, replacing: previous, context: context) {
                return refusal
            }
        }
        switch outcome {
        case .proven(let endpoint):
            let registration = try store.register(recordID: record.id, token: token, settings: settings, endpoint: endpoint, now: .now())
            return try answer(registration == .unchanged ? .userAlreadySubscribed : .userUpdated)
        case .subscribed(let endpoint):
            _ = try store.register(recordID: record.id, token: token, settings: settings, endpoint: endpoint, now: .now())
            return try answer(.userSubscribed)
        case .autodiscoverFailed:
            return .ok(.autodiscoverFailed, [("message", "The Exchange server for this address could not be discovered.")])
        case .authenticationFailed:
            return .ok(.exchangeAuthFailed, [("message", "Exchange refused the credentials for this mailbox.")])
        case .endpointNotTrusted:
            return .ok(.exchangeAuthFailed, [("message", "ewsUrl is not this mailbox's Exchange server.")])
        case .ownServer:
            preconditionFailure("a registration at the device's own server ends at its claim")
        case .throttled(let retryAfter):
            var throttled = APIResponse.error(429, .tooManyRequests, "Too many failed attempts from this device or address; retry later.")
            throttled.extraHeaders = [("Retry-After", "\(retryAfter.wholeSeconds)")]
            return throttled
        case .busy:
            var busy = APIResponse.error(503, .serviceUnavailable, "The service is busy; retry shortly.")
            busy.extraHeaders = [("Retry-After", "5")]
            return busy
        case .failed:
            return .ok(.exchangeError, [("message", "Exchange could not be subscribed to; try again later.")])
        }
    }

    /// The mailbox a registration must prove: `email`, or a basic-auth user name that is
    /// the address itself (its hash is the userid), as some older clients send only that.
    private static func mailboxAddress(_ email: String?, credentials: MailCredentials, userID: String) -> String? {
        if let email, !email.isEmpty { return email }
        guard case .basic(let userName, _) = credentials.method, Identity.isEmailAddress(userName),
              Digest.constantTimeEqual(Array(Hex.encode(Digest.sha256(userName.lowercased())).utf8), Array(userID.utf8)) else { return nil }
        return userName
    }

    /// Exactly one authentication method: OAuth (with or without what renews it), user
    /// name and password (for Exchange, or with `imapUrl` a Dovecot server's IMAP), or a
    /// client certificate (CBAData).
    private static func exchangeCredentials(_ creds: [String: JSONValue]) throws(APIError) -> MailCredentials {
        var methods: [MailCredentials.Method] = []
        if let token = creds["oauthAccessToken"]?.stringValue, !token.isEmpty {
            methods.append(.oauth(accessToken: token))
        }
        if let token = creds["graphAccessToken"]?.stringValue, !token.isEmpty {
            methods.append(.graph(accessToken: token))
        }
        if let user = creds["userName"]?.stringValue, !user.isEmpty {
            methods.append(.basic(userName: user, password: try creds.sealedString("password")))
        }
        if let cba = creds["CBAData"] {
            guard case .object(let members) = cba, let certificate = members["certificate"]?.stringValue,
                  let pkcs12 = Base64.decodeLenient(certificate), !pkcs12.isEmpty else { throw .sealedParameterRejected }
            methods.append(.certificate(pkcs12: pkcs12, password: members["password"]?.stringValue ?? ""))
        }
        guard methods.count == 1, let method = methods.first else { throw .sealedParameterRejected }
        var refresh: OAuthRefresh?
        if let member = creds["oauthRefresh"] {
            guard case .oauth = method else { throw .sealedParameterRejected }
            refresh = try oauthRefresh(member)
        }
        // The server the device names: an EWS URL, or a Dovecot server's IMAP URL (with
        // a user name and password only), never both.
        let ewsURL = creds["ewsUrl"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let imapURL = creds["imapUrl"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        if let imapURL {
            guard ewsURL == nil, case .basic = method, imapURL.utf8.count <= 255,
                  imapURL.lowercased().hasPrefix("imaps://") || imapURL.lowercased().hasPrefix("imap://") else { throw .sealedParameterRejected }
        }
        return MailCredentials(method: method, serverURL: imapURL ?? ewsURL, oauthRefresh: refresh)
    }

    /// `oauthRefresh`: {"refreshToken", "tokenEndpoint" (https), "clientId", "scope"?}.
    /// Whether the endpoint may be reached is decided at each exchange, by the same
    /// outbound policy as Exchange's (docs/security.md).
    private static func oauthRefresh(_ member: JSONValue) throws(APIError) -> OAuthRefresh {
        guard case .object(let fields) = member, Set(fields.keys).isSubset(of: ["refreshToken", "tokenEndpoint", "clientId", "scope"]) else {
            throw .sealedParameterRejected
        }
        func text(_ name: String, limit: Int) throws(APIError) -> String? {
            guard let value = fields[name] else { return nil }
            guard let text = value.stringValue, !text.isEmpty, text.utf8.count <= limit,
                  text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { throw .sealedParameterRejected }
            return text
        }
        guard let refreshToken = try text("refreshToken", limit: OAuthRefresh.maximumTokenBytes),
              let endpoint = try text("tokenEndpoint", limit: OAuthRefresh.maximumFieldBytes),
              let clientID = try text("clientId", limit: OAuthRefresh.maximumFieldBytes) else { throw .sealedParameterRejected }
        guard let parts = URLParts(endpoint), parts.scheme == "https", !parts.hasUserInfo, !endpoint.contains("#") else {
            throw .invalidRequest("oauthRefresh.tokenEndpoint must be an https URL.")
        }
        return OAuthRefresh(refreshToken: refreshToken, tokenEndpoint: endpoint, clientID: clientID,
                            scope: try text("scope", limit: OAuthRefresh.maximumFieldBytes))
    }

    // MARK: /unregister

    static let unregister = sealedOperation(parameter: "token", use: .unregister) { operation, request, context in
        let token: DeviceToken
        let value: SealedUse.Checked?
        switch try operation.objectOrText() {
        case .object(let payload):
            (token, value) = (try payload.members.sealedToken("apnsToken"), payload)
        case .text(let bare):
            // The original contract's form: the token alone (no use, no time).
            guard let sent = DeviceToken(sent: bare) else { throw APIError.sealedParameterRejected }
            (token, value) = (sent, nil)
        }
        guard let device = try operation.device(token) else { return .ok(.deviceUnregistered) }
        try DeviceSecret.authorise(device, by: value, operation: "unregister", context: context)
        if try operation.store.unregister(recordID: operation.record.id, token: token) {
            context.logger.info("last device unregistered; user record deleted")
        }
        return .ok(.deviceUnregistered)
    }

    // MARK: /updatedevice

    static let updateDevice = sealedOperation(parameter: "token", use: .updateDevice) { operation, request, context in
        let store = operation.store
        let new: DeviceToken
        switch try operation.objectOrText() {
        case .object(let payload):
            let old = try payload.members.sealedToken("oldApnsToken")
            new = try payload.members.sealedToken("apnsToken")
            guard let device = try operation.device(old) else { return .ok(.updateFail) }
            try DeviceSecret.authorise(device, by: payload, operation: "updatedevice", context: context)
            // A row the new token has already (the same phone, registered on its own) is
            // merged away: it too must be this secret's.
            if old != new, let merged = try operation.device(new) {
                try DeviceSecret.authorise(merged, by: payload, operation: "updatedevice", context: context)
            }
            guard try store.replaceToken(recordID: operation.record.id, old: old, new: new, now: .now()) else { return .ok(.updateFail) }
        case .text(let bare):
            // The original contract's form: the device's current token alone. There is no
            // old token to replace, so it confirms the device: flags refreshed, a
            // check-in; UpdateFail when the token is not registered (register it).
            guard let token = DeviceToken(sent: bare) else { throw APIError.sealedParameterRejected }
            new = token
            guard let device = try operation.device(token) else { return .ok(.updateFail) }
            try DeviceSecret.authorise(device, by: nil, operation: "updatedevice", context: context)
            try store.checkIn(deviceID: device.id, now: .now())
        }
        if let device = try store.device(recordID: operation.record.id, token: new) {
            try store.refreshFlags(deviceID: device.id, badge: request.badge, development: request.development)
        }
        return .ok(.updateSuccess)
    }

    // MARK: /getsubscriptionstatus and /getsubscriptionstatusv2

    static let subscriptionStatusV1 = Route(methods: ["POST"], requiresAPIToken: true, bucket: userBucket) { request, context in
        let userID = try Identity.userID(request.parameters)
        // Still parsed, so a malformed date is the 400 it always was; no longer compared.
        _ = try request.parameters["lastMessageDate"].flatMap { text throws(APIError) -> Timestamp? in
            if text.isEmpty { return nil }
            guard let date = Timestamp(apiString: text) else {
                throw APIError.invalidRequest("Parameter 'lastMessageDate' must be MM/dd/yyyy HH:mm:ss.SSS (UTC).")
            }
            return date
        }
        let store = store(context)
        guard let record = try store.record(userID: userID) else { return .ok(.userSubscriptionNotFound) }
        let now = Timestamp.now()
        try store.checkIn(recordID: record.id, now: now)
        // The subscription's health only. v1 names no device and proves nothing: its only
        // inputs are `userid` (public: the SHA-256 of the address) and a date in clear, so
        // any ApiToken holder could call it. Answering from the time of the last
        // notification ("one came after your lastMessageDate") let such a caller
        // binary-search when someone last got mail, and answering from device state (all
        // tokens rejected, which happens when a push is tried) told when a push was tried.
        // v2 keeps both: the device proves itself with its sealed push token.
        return .ok(status(record, lastNotified: nil, lastMessageDate: nil, now: now, context: context))
    }

    static let subscriptionStatusV2 = sealedOperation(parameter: "subscriptionPayload", use: .checkIn,
                                                      withDevices: true) { operation, request, context in
        let payload = try operation.object()
        let token = try payload.sealedToken("pushToken")
        let ignoreLastMessageDate = try payload.sealedFlag("ignoreLastMessageDate")
        // The `ens.ts` of the newest push the device has: server time against server
        // time, so no device clock, fast or slow, skews the answer. It replaces
        // lastMessageDate, which is then not required.
        let lastNotificationTs = try payload["lastNotificationTs"].map { member throws(APIError) -> Timestamp in
            guard let text = member.scalarText, let milliseconds = Int64(text), milliseconds >= 0 else { throw .sealedParameterRejected }
            return Timestamp(millisecondsSinceEpoch: milliseconds)
        }
        let lastMessageDate = ignoreLastMessageDate || lastNotificationTs != nil ? nil : try payload.sealedTimestamp("lastMessageDate")
        guard let device = try operation.device(tokenHash: context.services.vault.tokenHash(token)) else {
            return .ok(.userSubscriptionNotFound)
        }
        // APNs said this token is dead: the device must register again (with the token
        // it has now), which is what re-enables it; until then it is not "subscribed".
        // So must a device bound to another server than the live subscription's (the
        // mailbox moved, or someone else's server held the record): it hears nothing
        // until it proves itself at the live one.
        if device.disabledAt != nil || !device.isBound(to: operation.record) { return .ok(.userRecordPresentNotSubscribed) }
        let now = Timestamp.now()
        try operation.store.checkIn(deviceID: device.id, now: now)
        // The flags are clear headers, and the check-in payload is not single-use: they
        // change a device with a secret only through its sealed operations.
        if device.secretHash == nil {
            try operation.store.refreshFlags(deviceID: device.id, badge: request.badge, development: request.development)
        }
        let credentials = try offeredCredentials(request, device: device, operation: operation, context: context)
        let renewed = credentials.contains { $0 == ("credentials", "Stored") }
        if !ignoreLastMessageDate, let lastNotificationTs {
            let newest = try context.notificationLog.newestCreatedAt(deviceID: device.id)
            return .ok(status(operation.record, lastNotified: newest, lastMessageDate: lastNotificationTs, now: now, context: context,
                              credentialsRenewed: renewed), credentials)
        }
        return .ok(status(operation.record, lastNotified: device.lastNotifiedAt, lastMessageDate: lastMessageDate, now: now, context: context,
                          credentialsRenewed: renewed), credentials)
    }

    /// A check-in's optional `creds` (sealed like a registration's, single-use when
    /// bound): new credentials for the user's subscription (a changed password, a
    /// renewed token or certificate). Only a device that registered a secret may offer
    /// them, with that secret inside the bound `creds`, and only credentials that open
    /// the mailbox (`email`, as at registration) at the live subscription's server are
    /// left for its next callback: nobody who holds the push token alone (Apple, Google)
    /// can replace working credentials, and a wrong password replaces nothing. The
    /// answer says `credentials: Stored`, or `Unused` (register again, which proves
    /// them) when the device has no secret, names no mailbox, the credentials were
    /// refused, or the subscription keeps none (Graph) or is not live.
    private static func offeredCredentials(_ request: Request, device: DeviceRecord, operation: SealedOperation,
                                           context: RequestContext) throws -> [(String, String)] {
        guard let sealed = nonEmpty(request.parameters["creds"]) else { return [] }
        let unused = [("credentials", "Unused")]
        let opened = try opener(operation.store, record: operation.record, use: .checkInCreds, maximumBlocks: SealedParameter.maximumBlocks,
                                context: context).opened(sealed)
        guard device.secretHash != nil else {
            context.logger.info("check-in credentials unused: the device has no secret", metadata: ["device": "\(device.id)"])
            return unused
        }
        try DeviceSecret.authorise(device, by: opened, operation: "getsubscriptionstatusv2.creds", context: context)
        let credentials = try exchangeCredentials(opened.members)
        guard let endpoint = device.endpoint, let registrar = context.services.mailBackends.registrar(of: operation.record.backend),
              let mailbox = mailboxAddress(request.parameters["email"], credentials: credentials, userID: operation.record.userID) else {
            return unused
        }
        let presenter = ProofPresenter(tokenHash: device.tokenHash, remoteAddress: request.clientAddress, userName: credentials.userName)
        let offer = MailboxRequest(record: operation.record, mailbox: mailbox, credentials: credentials, protocolVersion: nil, presenter: presenter)
        switch try registrar.offerCredentials(offer, endpoint: endpoint, context: context) {
        case .proven:
            return [("credentials", "Stored")]
        case .busy:
            context.logger.warning("check-in credentials refused: this process's registration places are all taken")
            throw APIError.serviceUnavailable
        case .throttled(let retryAfter):
            throw APIError(429, .tooManyRequests, "Too many failed attempts from this device or address; retry later.")
                .adding(header: ("Retry-After", "\(retryAfter.wholeSeconds)"))
        case .subscribed, .autodiscoverFailed, .authenticationFailed, .endpointNotTrusted, .ownServer, .failed:
            return unused
        }
    }

    /// `credentialsRenewed`: this check-in brought new credentials, so a refresh token
    /// the token endpoint refused no longer counts against the subscription.
    private static func status(_ record: UserRecord, lastNotified: Timestamp?, lastMessageDate: Timestamp?, now: Timestamp, context: RequestContext,
                               credentialsRenewed: Bool = false) -> ResponseCode {
        guard record.subscriptionIsHealthy(now: now, grace: context.settings.deviceAPI.subscriptionGrace) else {
            return .userRecordPresentNotSubscribed
        }
        // Its notifications go generic until new credentials come: register again.
        if record.credentialsRefused && !credentialsRenewed { return .userRecordPresentNotSubscribed }
        if let lastMessageDate, let lastNotified, lastNotified > lastMessageDate {
            return .userRecordPresentNotSubscribed
        }
        return .userSubscribed
    }

    // MARK: /updatesynckey

    static let updateSyncKey = sealedOperation(parameter: "info", use: .updateSyncKey) { operation, request, context in
        let value = try operation.opened()
        let payload = value.members
        let token = try payload.sealedToken("apnsToken")
        let syncKey = try payload.sealedString("backgroundSyncKey")
        let expiry = try payload.sealedTimestamp("syncKeyExpirationTime")
        let store = operation.store
        guard syncKey.utf8.count <= 512, let device = try operation.device(token), expiry > .now() else {
            return .ok(.updateFail)
        }
        try DeviceSecret.authorise(device, by: value, operation: "updatesynckey", context: context)
        try store.storeSyncKey(deviceID: device.id, tokenHash: device.tokenHash, syncKey: syncKey, expiresAt: expiry)
        try store.refreshFlags(deviceID: device.id, badge: request.badge, development: request.development)
        return .ok(.updateSuccess)
    }

    // MARK: The sealed operations' shared start

    /// A device operation that carries one sealed parameter, after the start every such
    /// operation shares: the user from `userid`, the parameter present, the user's
    /// record (and its claims' and their devices, when asked), and the user's key to
    /// open it with.
    final class SealedOperation {
        let store: SubscriptionStore
        /// The record the operation is about: the user's own, until `device(_:)` or
        /// `device(tokenHash:)` finds the device in one of the user's claims (migration
        /// 024), which is then this.
        private(set) var record: UserRecord
        /// The user's own record's devices; empty unless the route asked for them.
        let devices: [DeviceRecord]
        /// The sealed parameter, and the user's key that opens it.
        let sealed: String
        let opener: SealedPayload

        init(store: SubscriptionStore, record: UserRecord, devices: [DeviceRecord], sealed: String, opener: SealedPayload) {
            (self.store, self.record, self.devices, self.sealed, self.opener) = (store, record, devices, sealed, opener)
        }

        /// The sealed parameter as a JSON object.
        func object() throws(APIError) -> [String: JSONValue] { try opener.object(sealed) }
        /// The sealed parameter as a JSON object, with whether it was bound.
        func opened() throws(APIError) -> SealedUse.Checked { try opener.opened(sealed) }
        /// The sealed parameter as a bare string.
        func text() throws(APIError) -> String { try opener.text(sealed) }
        /// The user's device with this push token, on its own record or a claim (which
        /// becomes `record`); nil when it has none.
        func device(_ token: DeviceToken) throws -> DeviceRecord? {
            if let device = try store.device(recordID: record.id, token: token) { return device }
            guard !record.isClaim, let (claim, device) = try store.claimHolding(userID: record.userID, tokenHash: store.vault.tokenHash(token)) else {
                return nil
            }
            record = claim
            return device
        }

        /// As `device(_:)`, first among the devices read with the record (`withDevices`).
        func device(tokenHash: [UInt8]) throws -> DeviceRecord? {
            if let device = devices.first(where: { Digest.constantTimeEqual($0.tokenHash, tokenHash) }) { return device }
            guard !record.isClaim, let (claim, device) = try store.claimHolding(userID: record.userID, tokenHash: tokenHash) else { return nil }
            record = claim
            return device
        }
        /// The sealed parameter as whichever of the two it is.
        func objectOrText() throws(APIError) -> SealedPayload.Plaintext { try opener.objectOrText(sealed) }
    }

    /// A route for a sealed device operation: 400 for a missing `userid` or sealed
    /// parameter, UserSubscriptionNotFound for an unknown user, then `body`.
    static func sealedOperation(parameter: String, use: SealedUse, withDevices: Bool = false,
                                _ body: @escaping @Sendable (SealedOperation, Request, RequestContext) throws -> APIResponse) -> Route {
        Route(methods: ["POST"], requiresAPIToken: true, bucket: userBucket) { request, context in
            let userID = try Identity.userID(request.parameters)
            let sealed = try request.parameters.required(parameter)
            let store = store(context)
            let found: (record: UserRecord, devices: [DeviceRecord])?
            if withDevices {
                found = try store.recordWithDevices(userID: userID)
            } else {
                found = try store.record(userID: userID).map { ($0, []) }
            }
            guard let (own, devices) = found else { return .ok(.userSubscriptionNotFound) }
            let opener = try opener(store, record: own, use: use, context: context)
            return try body(SealedOperation(store: store, record: own, devices: devices, sealed: sealed, opener: opener), request, context)
        }
    }

    /// A parameter's value, nil when absent or empty (the API's rule: an empty value counts as absent).
    static func nonEmpty(_ text: String?) -> String? {
        guard let text, !text.isEmpty else { return nil }
        return text
    }
}

extension MailboxOutcome {
    /// The device may be stored: its credentials opened the mailbox.
    fileprivate var isSuccess: Bool {
        switch self {
        case .subscribed, .proven: true
        case .autodiscoverFailed, .authenticationFailed, .endpointNotTrusted, .ownServer, .throttled, .busy, .failed: false
        }
    }
}
