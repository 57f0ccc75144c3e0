public import Foundation

/// Where and as whom ``ENSClient`` talks to ENS.
public struct ENSConfiguration: Sendable {
    /// The server, e.g. `https://ens.example.com`.
    public var baseURL: URL
    /// The app's `ApiToken` (`ens_` and 64 hex digits). It ships in every install, so
    /// ENS treats it as public; ENSKit sends it and nothing else proves anything by it.
    public var apiToken: String
    /// The app's bundle id (APNs) or Android package name (FCM): `bundleid`.
    public var bundleID: String
    /// The `badge` header: whether pushes carry the unread count. Nil sends no header,
    /// which keeps what ENS has stored for the device.
    public var badge: Bool?
    /// The `development` header: a development build, whose pushes go to the APNs
    /// sandbox. Nil sends no header.
    public var development: Bool?
    public var retry: ENSRetryPolicy

    public init(baseURL: URL, apiToken: String, bundleID: String, badge: Bool? = nil, development: Bool? = nil,
                retry: ENSRetryPolicy = ENSRetryPolicy()) {
        self.baseURL = baseURL
        self.apiToken = apiToken
        self.bundleID = bundleID
        self.badge = badge
        self.development = development
        self.retry = retry
    }

    /// Key store items of different servers never mix.
    var namespace: String {
        let host = baseURL.host ?? "ens"
        return baseURL.port.map { "\(host):\($0)" } ?? host
    }
}

/// When ``ENSClient`` tries a request again: after a 429 or 503, waiting what the
/// server's `Retry-After` says (or `defaultDelay`, doubled each time, without one), but
/// never longer than `maximumDelay`: a longer wait is the caller's to schedule, and the
/// error carries it.
public struct ENSRetryPolicy: Sendable {
    public var maximumRetries: Int
    public var maximumDelay: Duration
    /// For an answer without `Retry-After`.
    public var defaultDelay: Duration

    public init(maximumRetries: Int = 2, maximumDelay: Duration = .seconds(30), defaultDelay: Duration = .seconds(1)) {
        precondition(maximumRetries >= 0 && maximumDelay >= .zero && defaultDelay >= .zero, "ENSRetryPolicy: negative values")
        self.maximumRetries = maximumRetries
        self.maximumDelay = maximumDelay
        self.defaultDelay = defaultDelay
    }

    /// No retries: every 429 and 503 is the caller's.
    public static let none = ENSRetryPolicy(maximumRetries: 0)
}

/// The device side of ENS's API: one typed call per endpoint (docs/api.md).
///
/// It seals every sealed parameter under the user's public key, which it fetches once
/// and keeps (pins) in its ``ENSKeyStore``, and fetches again when ENS no longer opens
/// what it sealed (the user's record was made anew, with a new key). It binds every
/// sealed value to its use and time (`purpose`, `sealedAt`), makes and keeps the
/// device secret and, for `encrypted`, the device's P-256 key. It holds no other state;
/// copies share the transport and the key store.
///
/// ```swift
/// let client = ENSClient(configuration: .init(baseURL: url, apiToken: token, bundleID: "com.example.mail"),
///                        keyStore: KeychainKeyStore(accessGroup: "TEAMID.com.example.mail.shared"))
/// let user = ENSUser(email: "someone@example.com")
/// let token = try ENSPushToken(apnsDeviceToken: deviceToken)
/// let result = try await client.register(ENSRegistration(user: user, token: token,
///     credentials: .oauth(accessToken: accessToken), privacy: .encrypted))
/// ```
public struct ENSClient: Sendable {
    public let configuration: ENSConfiguration
    let transport: any ENSHTTPTransport
    let keyStore: any ENSKeyStore
    /// Injected by the tests, so retries take no real time.
    let sleep: @Sendable (Duration) async -> Void
    let now: @Sendable () -> Date
    /// Every sealed value's `sealedAt`, strictly later than the last one this client
    /// (and its copies) sealed: ENS spends a chunked value by its use, device and time.
    let sealingClock = SealingClock()

    public init(configuration: ENSConfiguration, transport: any ENSHTTPTransport = URLSessionTransport(), keyStore: any ENSKeyStore) {
        self.init(configuration: configuration, transport: transport, keyStore: keyStore,
                  sleep: { delay in try? await Task.sleep(for: delay) }, now: { Date() })
    }

    init(configuration: ENSConfiguration, transport: any ENSHTTPTransport, keyStore: any ENSKeyStore,
         sleep: @escaping @Sendable (Duration) async -> Void, now: @escaping @Sendable () -> Date) {
        self.configuration = configuration
        self.transport = transport
        self.keyStore = keyStore
        self.sleep = sleep
        self.now = now
    }

    // MARK: Endpoints

    /// `GET /alive`: whether ENS answers and can use its database.
    public func alive() async -> Bool {
        let request = ENSHTTPRequest(method: "GET", url: configuration.baseURL.appendingPathComponent("alive"))
        guard let response = try? await transport.send(request), response.status == 200 else { return false }
        return (try? WireJSON.decode(AnswerEnvelope.self, from: response.body))?.responseCode == "Alive"
    }

    /// `POST /getpublickey`: the user's public key, which ENSKit pins for sealing. For a
    /// new user this creates ENS's record (it may then answer 503 while its key pool
    /// refills, or 429 past the app's quota of new users).
    @discardableResult
    public func getPublicKey(for user: ENSUser) async throws(ENSError) -> ENSPublicKey {
        let answer = try await call("getpublickey", accepting: ["UserAlreadySubscribed", "UserRecordPresentNotSubscribed"]) { () throws(ENSError) in
            PublicKeyRequest(userid: user.userID, email: user.email)
        }
        let body = try answer.decode(PublicKeyAnswer.self)
        guard body.userid == user.userID else { throw answer.malformed("'userid' is not the user's") }
        let pem = body.pubKey
        _ = try ENSSealer(publicKeyPEM: pem)
        try store(Data(pem.utf8), .serverKey(namespace, user.userID))
        // Envelopes once this key's answer says ENS opens them: a host of 0.5.0 or
        // earlier (a cluster in a rolling upgrade) says nothing, and gets chunked values.
        let sealing = answer.sealing == ENSSealer.Form.envelope.rawValue ? ENSSealer.Form.envelope : nil
        try store(sealing.map { Data($0.rawValue.utf8) }, .serverSealing(namespace, user.userID))
        return ENSPublicKey(userID: user.userID, publicKeyPEM: pem, isSubscribed: answer.code == "UserAlreadySubscribed")
    }

    /// `POST /registerdevicev2`. Business failures are thrown: ``ENSError/exchangeAuthFailed(message:)``,
    /// ``ENSError/autodiscoverFailed(message:)``, ``ENSError/exchangeError(message:)``,
    /// and 429 (``ENSError/Code/tooManyRequests``) after failed proofs.
    ///
    /// The device secret is made on the first registration and sent with every one; for
    /// `encrypted` the device's P-256 key too; for `blind` (a mailbox registered with
    /// ``ENSCredentials/graph(accessToken:)``) the certificate of the device's
    /// ``ENSBlindKey``, made now if it has none or its certificate expires within
    /// ``ENSClient/blindCertificateRenewal``. A certificate ENS refuses is thrown as
    /// ``ENSError/blindRefused(_:message:)``. When ENS has no record of the user (the
    /// last device left), ENSKit fetches the new key and registers once more.
    public func register(_ registration: ENSRegistration) async throws(ENSError) -> ENSRegistrationResult {
        guard let email = registration.user.email else { throw .invalidArgument("registering needs the user's email address") }
        let userID = registration.user.userID
        var creds = RegistrationCreds(credentials: try registration.credentials.members(), token: TokenMember(registration.token))
        creds.ewsUrl = registration.ewsURL?.absoluteString
        if let imapURL = registration.imapURL {
            guard registration.ewsURL == nil, case .password = registration.credentials,
                  ["imaps", "imap"].contains(imapURL.scheme?.lowercased() ?? "") else {
                throw .invalidArgument("an IMAP URL (imaps:// or imap://) goes with a user name and password only, never with an EWS URL")
            }
            creds.imapUrl = imapURL.absoluteString
        }
        creds.deviceSecret = try deviceSecret(for: userID, creating: true)
        // The mode goes inside the sealed creds, where no one who sees the request can
        // change it; the blind certificate (too large to seal) travels in clear, named
        // there by its SHA-256.
        var certificate: String?
        if let privacy = registration.privacy {
            creds.privacy = privacy.rawValue
            if privacy == .encrypted { creds.privacyKey = try previewKey(for: userID, creating: true).publicKeyX963.base64EncodedString() }
            if privacy == .blind {
                let key = try blindKey(for: userID, creating: true)
                creds.privacyCertificateSHA256 = key.certificateSHA256
                certificate = key.certificateBase64
            }
        }
        let sealedCreds = creds
        let body = { (seal: SealContext) throws(ENSError) -> RegistrationRequest in
            RegistrationRequest(userid: userID, email: email, bundleid: configuration.bundleID, force: registration.force ? 1 : 0,
                                exchVersion: registration.exchangeVersion, defaultSound: registration.defaultSound,
                                ewsDeviceId: registration.ewsDeviceID, privacyCertificate: certificate,
                                creds: try seal(sealedCreds, as: "creds", maximumBlocks: ENSSealer.maximumCredentialBlocks))
        }
        let accepted: Set<String> = ["UserSubscribed", "UserUpdated", "UserAlreadySubscribed"]
        var answer = try await sealedCall("registerdevicev2", user: registration.user,
                                          accepting: accepted.union(["UserSubscriptionNotFound"]), body: body)
        if answer.code == "UserSubscriptionNotFound" {
            // The record went away (its last device left, or the reaper) and with it
            // the key we pinned: a new record has a new key.
            try await getPublicKey(for: registration.user)
            answer = try await sealedCall("registerdevicev2", user: registration.user, accepting: accepted, body: body)
        }
        guard let outcome = ENSRegistrationResult.Outcome(rawValue: answer.code) else { throw answer.unexpected }
        let registered = try answer.decode(RegistrationAnswer.self)
        let tag = registered.pushTag
        try store(Data(registration.token.wireForm.utf8), .registeredToken(namespace, userID))
        if let tag {
            try store(Data(tag.utf8), .pushTag(namespace, userID))
            try store(Data(userID.utf8), .tagOwner(namespace, tag))
        }
        return ENSRegistrationResult(outcome: outcome, pushTag: tag, privacy: registered.privacy)
    }

    /// `POST /getsubscriptionstatus` (v1): a check-in for the user, from the
    /// subscription's health alone. Prefer ``checkIn(user:token:lastNotificationTimestamp:lastMessageDate:credentials:)``.
    public func checkInV1(user: ENSUser) async throws(ENSError) -> ENSCheckInResult {
        let answer = try await call("getsubscriptionstatus",
                                    accepting: ["UserSubscribed", "UserRecordPresentNotSubscribed", "UserSubscriptionNotFound"]) {
            () throws(ENSError) in CheckInV1Request(userid: user.userID)
        }
        return ENSCheckInResult(action: Self.action(answer.code, credentials: nil), credentials: nil)
    }

    /// `POST /getsubscriptionstatusv2`: this device's check-in, which keeps it from being
    /// reaped; run it from background refresh. `token` is the push token the OS gives
    /// now; ENSKit checks in with the one it registered and answers
    /// ``ENSCheckInResult/Action/updateToken(registered:)`` when they differ.
    ///
    /// - Parameters:
    ///   - lastNotificationTimestamp: `ens.ts` of the newest push the device got
    ///     (``ENSPush/timestamp``): ENS answers `registerAgain` when it made a newer one.
    ///   - lastMessageDate: the original contract's device-clock date, used only when
    ///     there is no timestamp. With neither, ENS ignores missed notifications.
    ///   - credentials: new credentials (a changed password, a renewed token), sealed to
    ///     the subscription and used from its next callback.
    public func checkIn(user: ENSUser, token: ENSPushToken, lastNotificationTimestamp: Int64? = nil, lastMessageDate: Date? = nil,
                        credentials: ENSCredentials? = nil) async throws(ENSError) -> ENSCheckInResult {
        let registered = try registeredToken(for: user.userID) ?? token
        var payload = CheckInPayload(pushToken: registered.wireForm)
        if let lastNotificationTimestamp {
            payload.lastNotificationTs = lastNotificationTimestamp
        } else if let lastMessageDate {
            payload.lastMessageDate = ENSDate.string(lastMessageDate)
        } else {
            payload.ignoreLastMessageDate = 1
        }
        var creds: CheckInCreds?
        if let credentials {
            // ENS takes them only from the device that registered a secret, and only
            // once they open the mailbox (`email`) at the subscription's server.
            creds = CheckInCreds(credentials: try credentials.members(), deviceSecret: try deviceSecret(for: user.userID, creating: false))
        }
        let answer = try await sealedCall("getsubscriptionstatusv2", user: user,
                                          accepting: ["UserSubscribed", "UserRecordPresentNotSubscribed", "UserSubscriptionNotFound"]) {
            (seal: SealContext) throws(ENSError) -> CheckInRequest in
            var sealedCreds: String?
            if let creds { sealedCreds = try seal(creds, as: "creds", maximumBlocks: ENSSealer.maximumCredentialBlocks) }
            return CheckInRequest(userid: user.userID, email: creds == nil ? nil : user.email,
                                  subscriptionPayload: try seal(payload, as: "subscriptionPayload"), creds: sealedCreds)
        }
        let stored = try answer.decode(CheckInAnswer.self).credentials
        var action = Self.action(answer.code, credentials: stored)
        if action == .nothing && registered != token { action = .updateToken(registered: registered) }
        return ENSCheckInResult(action: action, credentials: stored)
    }

    static func action(_ code: String, credentials: ENSCheckInResult.Credentials?) -> ENSCheckInResult.Action {
        switch code {
        case "UserSubscribed": return credentials == .unused ? .registerAgain(.credentialsUnused) : .nothing
        case "UserRecordPresentNotSubscribed": return .registerAgain(.notSubscribed)
        default: return .registerAgain(.notFound)
        }
    }

    /// `POST /updatedevice`: the OS gave the device a new push token. The device keeps
    /// its settings, mode, secret, sync key and history.
    public func updateDevice(user: ENSUser, from old: ENSPushToken, to new: ENSPushToken) async throws(ENSError) {
        let token = UpdateDeviceToken(old: OldTokenMember(old), new: TokenMember(new),
                                      deviceSecret: try deviceSecret(for: user.userID, creating: false))
        let answer = try await sealedCall("updatedevice", user: user, accepting: ["UpdateSuccess", "UpdateFail", "UserSubscriptionNotFound"]) {
            (seal: SealContext) throws(ENSError) in SealedTokenRequest(userid: user.userID, token: try seal(token, as: "token"))
        }
        try Self.requireSuccess(answer)
        try store(Data(new.wireForm.utf8), .registeredToken(namespace, user.userID))
    }

    /// `POST /unregister`: removes the device (idempotent), and forgets what ENSKit kept
    /// for the user on this device (secret, keys, tag). If it was the user's last
    /// device, ENS deletes the record and ends the subscription.
    public func unregister(user: ENSUser, token: ENSPushToken) async throws(ENSError) {
        let object = UnregisterToken(token: TokenMember(token), deviceSecret: try deviceSecret(for: user.userID, creating: false))
        _ = try await sealedCall("unregister", user: user, accepting: ["DeviceUnregistered", "UserSubscriptionNotFound"]) {
            (seal: SealContext) throws(ENSError) in SealedTokenRequest(userid: user.userID, token: try seal(object, as: "token"))
        }
        try forget(user: user)
    }

    /// Deletes every item ENSKit keeps for the user (on sign-out, say).
    public func forget(user: ENSUser) throws(ENSError) {
        let userID = user.userID
        if let tag = try load(.pushTag(namespace, userID)).map({ String(decoding: $0, as: UTF8.self) }) {
            try store(nil, .tagOwner(namespace, tag))
        }
        for item in [ENSKeyStoreItem.serverKey(namespace, userID), .serverSealing(namespace, userID), .deviceSecret(namespace, userID),
                     .previewKey(namespace, userID),
                     .blindKey(namespace, userID), .registeredToken(namespace, userID), .pushTag(namespace, userID)] {
            try store(nil, item)
        }
    }

    /// `POST /updatesynckey`: every notification carries `key` until `expiration`
    /// (sealed in the private modes). At most 512 bytes.
    public func updateSyncKey(user: ENSUser, token: ENSPushToken, key: String, expiration: Date) async throws(ENSError) {
        guard key.utf8.count <= 512, !key.isEmpty else { throw .invalidArgument("a sync key is 1 to 512 bytes") }
        let info = SyncKeyInfo(token: TokenMember(token), backgroundSyncKey: key, syncKeyExpirationTime: ENSDate.string(expiration),
                               deviceSecret: try deviceSecret(for: user.userID, creating: false))
        let answer = try await sealedCall("updatesynckey", user: user, accepting: ["UpdateSuccess", "UpdateFail", "UserSubscriptionNotFound"]) {
            (seal: SealContext) throws(ENSError) in SealedInfoRequest(userid: user.userID, info: try seal(info, as: "info"))
        }
        try Self.requireSuccess(answer)
    }

    /// `POST /updateprivacy`: changes the device's mode; answers the mode its pushes now
    /// use (the operator's floor may make it stricter). For `encrypted`, ENSKit sends the
    /// device's P-256 key, made now if it has none. For `blind`, the certificate of the
    /// device's ``ENSBlindKey`` (made now if it has none, or if its certificate expires
    /// within ``ENSClient/blindCertificateRenewal``) in clear, named inside the sealed
    /// `info` by its SHA-256. Graph refusing the certificate is
    /// ``ENSError/exchangeError(message:)``; ENS refusing it,
    /// ``ENSError/blindRefused(_:message:)``.
    public func updatePrivacy(user: ENSUser, token: ENSPushToken, mode: ENSPrivacyMode) async throws(ENSError) -> ENSPrivacyMode {
        let key = mode == .blind ? try blindKey(for: user.userID, creating: true) : nil
        return try await updatePrivacy(user: user, token: token, mode: mode, blindKey: key)
    }

    func updatePrivacy(user: ENSUser, token: ENSPushToken, mode: ENSPrivacyMode, blindKey: ENSBlindKey?) async throws(ENSError) -> ENSPrivacyMode {
        var info = PrivacyInfo(pushToken: token.wireForm, deviceSecret: try requiredSecret(for: user.userID), privacy: mode.rawValue)
        if mode == .encrypted { info.privacyKey = try previewKey(for: user.userID, creating: true).publicKeyX963.base64EncodedString() }
        info.privacyCertificateSHA256 = blindKey?.certificateSHA256
        let sealedInfo = info
        let answer = try await sealedCall("updateprivacy", user: user,
                                          accepting: ["UpdateSuccess", "UpdateFail", "UserSubscriptionNotFound", "ExchangeError"]) {
            (seal: SealContext) throws(ENSError) in
            SealedInfoRequest(userid: user.userID, info: try seal(sealedInfo, as: "info"), privacyCertificate: blindKey?.certificateBase64)
        }
        if answer.code == "ExchangeError", mode == .blind { throw .exchangeError(message: answer.message ?? "") }
        try Self.requireSuccess(answer)
        return try answer.decode(PrivacyAnswer.self).privacy
    }

    /// Rotates the device's blind-mode key (`/updateprivacy` with `blind` and a new
    /// certificate): a new RSA key of `bits` and its certificate become current once ENS
    /// took them. The previous key is kept (``blindKeys(for:)``): Graph may encrypt to
    /// the old certificate until the subscription's next renewal, about 12 hours, and
    /// ``ENSPush`` picks each push's key by its `encryptionCertificateId`. The new key is
    /// kept from before the request, so a push encrypted to it opens even if the
    /// answer is lost; a refusal forgets it. Answers the new key.
    @discardableResult
    public func rotateBlindCertificate(user: ENSUser, token: ENSPushToken, bits: Int = 2048) async throws(ENSError) -> ENSBlindKey {
        let fresh = try ENSBlindKey(bits: bits, now: now())
        var ring = try blindKeyRing(for: user.userID)
        ring.retire(fresh, now: now())
        try saveBlindKeyRing(ring, for: user.userID)
        let effective: ENSPrivacyMode
        do {
            effective = try await updatePrivacy(user: user, token: token, mode: .blind, blindKey: fresh)
        } catch where error.code == .transport {
            throw error
        } catch {
            // ENS answered: it did not take the certificate.
            var ring = try blindKeyRing(for: user.userID)
            ring.remove(certificateID: fresh.certificateID)
            try saveBlindKeyRing(ring, for: user.userID)
            throw error
        }
        var updated = try blindKeyRing(for: user.userID)
        updated.install(fresh, now: now())
        try saveBlindKeyRing(updated, for: user.userID)
        guard effective == .blind else { throw .unexpectedAnswer(status: 200, responseCode: "UpdateSuccess") }
        return fresh
    }

    /// `POST /getnotification`: a `secure` notification's content, once. Nil when ENS
    /// has none for this device (already fetched, expired, another device's, unknown).
    public func getNotification(user: ENSUser, token: ENSPushToken, id: String) async throws(ENSError) -> ENSNotificationContent? {
        try await notificationContent(NotificationContentBody.self, user: user, token: token, id: id)?.content
    }

    /// `POST /getnotification` for a `blind` push that came without `ens.blind` (it
    /// would not have fit in a push): Graph's encrypted content, once, still encrypted
    /// to the device's certificate. Nil when ENS has none for this device.
    public func getBlindNotification(user: ENSUser, token: ENSPushToken, id: String) async throws(ENSError) -> BlindContent? {
        try await notificationContent(BlindContentBody.self, user: user, token: token, id: id)?.content
    }

    /// `/getnotification`'s `content`, read as `Content`; nil for `NotificationNotFound`.
    func notificationContent<Content: Decodable>(_ type: Content.Type, user: ENSUser, token: ENSPushToken,
                                                 id: String) async throws(ENSError) -> Content? {
        guard id.utf8.count == 32, id.utf8.allSatisfy({ Hex.isDigit($0) }) else { throw .invalidArgument("a notification id is 32 hex digits") }
        let info = NotificationInfo(pushToken: token.wireForm, deviceSecret: try requiredSecret(for: user.userID), id: id)
        let answer = try await sealedCall("getnotification", user: user, accepting: ["NotificationFound", "NotificationNotFound"]) {
            (seal: SealContext) throws(ENSError) in SealedInfoRequest(userid: user.userID, info: try seal(info, as: "info"))
        }
        guard answer.code == "NotificationFound" else { return nil }
        let found = try answer.decode(NotificationAnswer<Content>.self)
        guard found.id == id else { throw answer.malformed("'id' is not the one asked for") }
        return found.content
    }

    /// `POST /getnotificationhistory`: the device's newest notifications, newest first.
    public func getNotificationHistory(user: ENSUser, token: ENSPushToken, limit: Int? = nil) async throws(ENSError) -> [ENSHistoryEntry] {
        if let limit, limit < 1 { throw .invalidArgument("a history limit is at least 1") }
        let info = HistoryInfo(pushToken: token.wireForm, deviceSecret: try requiredSecret(for: user.userID), limit: limit)
        let answer = try await sealedCall("getnotificationhistory", user: user, accepting: ["NotificationHistory", "UserSubscriptionNotFound"]) {
            (seal: SealContext) throws(ENSError) in SealedInfoRequest(userid: user.userID, info: try seal(info, as: "info"))
        }
        guard answer.code == "NotificationHistory" else { throw .userNotFound }
        return try answer.decode(HistoryAnswer.self).notifications.map(\.entry)
    }

    /// `POST /marknotificationsread`: marks 1 to 25 of the device's notifications read;
    /// answers how many were newly marked.
    @discardableResult
    public func markNotificationsRead(user: ENSUser, token: ENSPushToken, ids: [String]) async throws(ENSError) -> Int {
        guard (1...25).contains(ids.count), ids.allSatisfy({ $0.utf8.count == 32 && $0.utf8.allSatisfy(Hex.isDigit) }) else {
            throw .invalidArgument("1 to 25 notification ids of 32 hex digits")
        }
        let info = MarkReadInfo(pushToken: token.wireForm, deviceSecret: try requiredSecret(for: user.userID), ids: ids)
        let answer = try await sealedCall("marknotificationsread", user: user, accepting: ["UpdateSuccess", "UpdateFail"]) {
            (seal: SealContext) throws(ENSError) in SealedInfoRequest(userid: user.userID, info: try seal(info, as: "info"))
        }
        try Self.requireSuccess(answer)
        guard let marked = Int(exactly: try answer.decode(MarkReadAnswer.self).marked) else { throw answer.malformed("'marked' is out of range") }
        return marked
    }

    // MARK: What the device keeps

    /// The user a push's `ens.tag` names, if this device registered it.
    public func user(forPushTag tag: String) throws(ENSError) -> ENSUser? {
        guard let data = try load(.tagOwner(namespace, tag)) else { return nil }
        return ENSUser(userID: String(decoding: data, as: UTF8.self))
    }

    /// The device's `encrypted`-mode key for the user, if it has one.
    public func previewKey(for user: ENSUser) throws(ENSError) -> ENSPreviewKey? {
        try previewKey(for: user.userID)
    }

    /// The push token ENSKit last registered for the user.
    public func registeredToken(for user: ENSUser) throws(ENSError) -> ENSPushToken? {
        try registeredToken(for: user.userID)
    }

    func previewKey(for userID: String, creating: Bool) throws(ENSError) -> ENSPreviewKey {
        let item = ENSKeyStoreItem.previewKey(namespace, userID)
        if let raw = try load(item) { return try ENSPreviewKey(rawRepresentation: raw) }
        guard creating else { throw .invalidArgument("no preview key for this user") }
        let key = ENSPreviewKey()
        try store(key.rawRepresentation, item)
        return key
    }

    func previewKey(for userID: String) throws(ENSError) -> ENSPreviewKey? {
        guard let raw = try load(.previewKey(namespace, userID)) else { return nil }
        return try ENSPreviewKey(rawRepresentation: raw)
    }

    func registeredToken(for userID: String) throws(ENSError) -> ENSPushToken? {
        guard let data = try load(.registeredToken(namespace, userID)) else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        return text.hasPrefix("fcm:") ? try ENSPushToken(fcmToken: String(text.dropFirst(4))) : try ENSPushToken(apnsHex: text)
    }

    /// The device secret (base64 of 32 random bytes), made on first use.
    func deviceSecret(for userID: String, creating: Bool) throws(ENSError) -> String? {
        let item = ENSKeyStoreItem.deviceSecret(namespace, userID)
        if let secret = try load(item) { return String(decoding: secret, as: UTF8.self) }
        guard creating else { return nil }
        var generator = SystemRandomNumberGenerator()
        let secret = Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
        try store(Data(secret.utf8), item)
        return secret
    }

    func requiredSecret(for userID: String) throws(ENSError) -> String {
        guard let secret = try deviceSecret(for: userID, creating: false) else { throw .noDeviceSecret }
        return secret
    }

    var namespace: String { configuration.namespace }

    func load(_ item: ENSKeyStoreItem) throws(ENSError) -> Data? {
        do { return try keyStore.data(for: item) } catch { throw .keyStore(error) }
    }

    func store(_ data: Data?, _ item: ENSKeyStoreItem) throws(ENSError) {
        do { try keyStore.set(data, for: item) } catch { throw .keyStore(error) }
    }

    // MARK: The wire

    /// An answer ENS gave with HTTP 200 and one of the codes the call accepts; the
    /// endpoint reads the rest of the body with ``decode(_:)``.
    struct Answer {
        let status: Int
        let code: String
        /// ENS's words, when it sent some.
        let message: String?
        let body: Data
        /// The `ENS-Sealing` header: the sealed forms ENS opens beside the chunked one.
        var sealing: String? = nil
        var unexpected: ENSError { .unexpectedAnswer(status: status, responseCode: code) }

        /// The answer with a member missing, of the wrong type, or out of its range.
        func malformed(_ what: String) -> ENSError { .malformedAnswer(status: status, responseCode: code, what) }

        /// The body as the endpoint's answer type, or ``malformed(_:)`` naming the member.
        func decode<T: Decodable>(_ type: T.Type) throws(ENSError) -> T {
            do {
                return try WireJSON.decode(T.self, from: body)
            } catch {
                throw malformed(error.description)
            }
        }
    }

    static func requireSuccess(_ answer: Answer) throws(ENSError) {
        switch answer.code {
        case "UpdateSuccess": return
        case "UpdateFail": throw .updateFailed
        case "UserSubscriptionNotFound": throw .userNotFound
        default: throw answer.unexpected
        }
    }

    /// Seals one object of a request for its use: bound to `<endpoint>.<name>` and the
    /// attempt's time, under the user's pinned key.
    struct SealContext {
        let sealer: ENSSealer
        let endpoint: String
        let time: Int64

        func callAsFunction<Payload: Encodable>(_ payload: Payload, as name: String,
                                                maximumBlocks: Int = ENSSealer.maximumBlocks) throws(ENSError) -> String {
            try sealer.seal(payload, purpose: "\(endpoint).\(name)", atMilliseconds: time, maximumBlocks: maximumBlocks)
        }
    }

    /// A call with sealed parameters: `makeBody` seals each with the ``SealContext`` it
    /// is given. When ENS answers 400, which is also what a value sealed under a stale
    /// key gets, the key is fetched again; only if it changed is the call made once
    /// more, sealed anew.
    func sealedCall<Body: ENSRequestBody>(_ endpoint: String, user: ENSUser, accepting: Set<String>,
                                          body makeBody: (SealContext) throws(ENSError) -> Body) async throws(ENSError) -> Answer {
        var sealer = try await pinnedSealer(for: user)
        var refreshed = false
        // ENS takes a bound value once: every attempt seals a new one, its time at least
        // a millisecond after the last value this client sealed, for any call (a clock
        // that did not move would otherwise seal one act twice).
        while true {
            let current = sealer
            do {
                return try await call(endpoint, accepting: accepting) { () throws(ENSError) -> Body in
                    let time = sealingClock.next(after: ENSSealer.milliseconds(now()))
                    return try makeBody(SealContext(sealer: current, endpoint: endpoint, time: time))
                }
            } catch where error.code == .invalidRequest && !refreshed {
                refreshed = true
                try await getPublicKey(for: user)
                let fresh = try await pinnedSealer(for: user)
                // Another key, or an envelope at a host that did not open it (a cluster
                // in a rolling upgrade): sealed anew, as the fresh answer says.
                guard fresh.publicKeyPEM != sealer.publicKeyPEM || fresh.form != sealer.form else { throw .invalidRequest }
                sealer = fresh
            }
        }
    }

    func pinnedSealer(for user: ENSUser) async throws(ENSError) -> ENSSealer {
        let pem: String
        if let stored = try load(.serverKey(namespace, user.userID)) {
            pem = String(decoding: stored, as: UTF8.self)
        } else {
            pem = try await getPublicKey(for: user).publicKeyPEM
        }
        let sealing = try load(.serverSealing(namespace, user.userID)).flatMap { ENSSealer.Form(rawValue: String(decoding: $0, as: UTF8.self)) }
        return try ENSSealer(publicKeyPEM: pem, form: sealing ?? .chunked)
    }

    /// POSTs the body `makeBody` makes as JSON, retrying 429 and 503 as
    /// ``ENSRetryPolicy`` allows, and maps the answer: a documented error status to its
    /// ``ENSError``, a 200 with an accepted code to an ``Answer``, anything else to
    /// ``ENSError/Code/unexpectedAnswer``. The body is made anew for every attempt: a
    /// sealed value that changes state is spent once ENS opened it, whatever the
    /// answer, so a retry after 429 or 503 carries a value sealed again.
    func call<Body: ENSRequestBody>(_ endpoint: String, accepting: Set<String>,
                                    body makeBody: () throws(ENSError) -> Body) async throws(ENSError) -> Answer {
        var headers = ["ApiToken": configuration.apiToken, "Content-Type": "application/json", "Accept": "application/json"]
        if let badge = configuration.badge { headers["badge"] = badge ? "1" : "0" }
        if let development = configuration.development { headers["development"] = development ? "1" : "0" }
        var attempt = 0
        while true {
            let body = try makeBody()
            let request = ENSHTTPRequest(method: "POST", url: configuration.baseURL.appendingPathComponent(endpoint), headers: headers,
                                         body: try WireJSON.encode(body))
            let response: ENSHTTPResponse
            do {
                response = try await transport.send(request)
            } catch {
                throw .transport(error)
            }
            let envelope = try? WireJSON.decode(AnswerEnvelope.self, from: response.body)
            let retryAfter = Self.retryAfter(response.header("Retry-After"), now: now())
            if response.status == 429 || response.status == 503, attempt < configuration.retry.maximumRetries {
                let delay = retryAfter ?? configuration.retry.defaultDelay * (1 << attempt)
                if delay <= configuration.retry.maximumDelay {
                    attempt += 1
                    await sleep(delay)
                    continue
                }
            }
            guard let envelope else { throw .unexpectedAnswer(status: response.status, responseCode: nil) }
            let code = envelope.responseCode
            switch (response.status, code) {
            case (200, _) where accepting.contains(code):
                return Answer(status: 200, code: code, message: envelope.message, body: response.body, sealing: response.header("ENS-Sealing"))
            case (200, "AutodiscoverFailed") where accepting.contains("UserSubscribed"):
                throw .autodiscoverFailed(message: envelope.message ?? "")
            case (200, "ExchangeAuthFailed") where accepting.contains("UserSubscribed"):
                throw .exchangeAuthFailed(message: envelope.message ?? "")
            case (200, "ExchangeError") where accepting.contains("UserSubscribed"):
                throw .exchangeError(message: envelope.message ?? "")
            case (400, "InvalidRequest"):
                // Only the blind mode's certificate problems are worded (it is public);
                // every other 400 has the uniform bytes.
                if body.privacyCertificate != nil, let message = envelope.message, message != Self.uniformMessage {
                    throw .blindRefused(ENSBlindRefusal(refusal: envelope.refusal, message: message), message: message)
                }
                throw .invalidRequest
            case (401, "Unauthorized"): throw .unauthorized
            case (404, "NotFound"): throw .notFound
            case (405, "MethodNotAllowed"): throw .methodNotAllowed
            case (413, "PayloadTooLarge"): throw .payloadTooLarge
            case (415, "UnsupportedMediaType"): throw .unsupportedMediaType
            case (429, "TooManyRequests"): throw .tooManyRequests(retryAfter: retryAfter)
            case (500, "InternalError"): throw .internalError
            case (503, "ServiceUnavailable"): throw .serviceUnavailable(retryAfter: retryAfter)
            default: throw .unexpectedAnswer(status: response.status, responseCode: code)
            }
        }
    }

    /// The message of ENS's uniform 400.
    static let uniformMessage = "The request is invalid."

    /// `Retry-After`: delta-seconds, or an HTTP date (RFC 9110), in whole seconds.
    static func retryAfter(_ value: String?, now: Date) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value) { return seconds >= 0 ? .seconds(seconds) : nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(max(0, Int(date.timeIntervalSince(now).rounded(.up))))
    }
}

extension ENSClient {
    /// A certificate that expires sooner than this (30 days) is replaced by a new key at
    /// the next blind registration or `updatePrivacy(.blind)`.
    public static let blindCertificateRenewal: Duration = .seconds(30 * 86_400)

    /// The device's current RSA key for Graph's encrypted notifications (blind mode),
    /// with its certificate, if kept.
    public func blindKey(for user: ENSUser) throws(ENSError) -> ENSBlindKey? {
        try blindKeyRing(for: user.userID).current
    }

    /// Every blind-mode key kept for the user: the current one first, then those a
    /// rotation retired within the last three days, newest first.
    public func blindKeys(for user: ENSUser) throws(ENSError) -> [ENSBlindKey] {
        try blindKeyRing(for: user.userID).all
    }

    /// The kept key whose certificate has the id a push names (`encryptionCertificateId`).
    public func blindKey(for user: ENSUser, certificateID: String) throws(ENSError) -> ENSBlindKey? {
        try blindKeyRing(for: user.userID).key(certificateID: certificateID)
    }

    /// Makes `key` the device's current blind-mode key for the user (the one it replaces
    /// is kept as a previous key); nil deletes every blind-mode key of the user. ENS
    /// learns of a new key only through ``register(_:)``, ``updatePrivacy(user:token:mode:)``
    /// or ``rotateBlindCertificate(user:token:bits:)``.
    public func setBlindKey(_ key: ENSBlindKey?, for user: ENSUser) throws(ENSError) {
        guard let key else { return try store(nil, .blindKey(namespace, user.userID)) }
        var ring = try blindKeyRing(for: user.userID)
        ring.install(key, now: now())
        try saveBlindKeyRing(ring, for: user.userID)
    }

    func blindKeyRing(for userID: String) throws(ENSError) -> ENSBlindKeyRing {
        guard let data = try load(.blindKey(namespace, userID)) else { return ENSBlindKeyRing() }
        let ring = try ENSBlindKeyRing(data: data)
        // An item from before certificates got one just now: keep it, so that every
        // request and push sees the same certificate.
        if !WireJSON.isObject(data) { try saveBlindKeyRing(ring, for: userID) }
        return ring
    }

    func saveBlindKeyRing(_ ring: ENSBlindKeyRing, for userID: String) throws(ENSError) {
        try store(try ring.data(), .blindKey(namespace, userID))
    }

    /// The current key, or (`creating`) a new one when there is none or its certificate
    /// expires within ``blindCertificateRenewal``.
    func blindKey(for userID: String, creating: Bool) throws(ENSError) -> ENSBlindKey {
        var ring = try blindKeyRing(for: userID)
        if let current = ring.current,
           current.notValidAfter.timeIntervalSince(now()) > TimeInterval(Self.blindCertificateRenewal.components.seconds) {
            return current
        }
        guard creating else { throw .invalidArgument("no blind key for this user") }
        let key = try ENSBlindKey(now: now())
        ring.install(key, now: now())
        try saveBlindKeyRing(ring, for: userID)
        return key
    }
}
