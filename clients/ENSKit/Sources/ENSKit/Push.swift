public import Foundation

/// Why a push is not one ENSKit can read.
public enum ENSPushError: Error, Sendable, Equatable {
    /// Not a push from ENS (no `ens` object, no notification id): leave it to others.
    case notENS
    /// From ENS, but a field has a form ENS never sends; the name says which.
    case malformed(String)
    /// The push's mode carries no content of that kind (opening `enc` of a `secure`
    /// push, say).
    case wrongMode
    /// The sealed content did not open: show the generic alert.
    case doesNotOpen
}

/// A push from ENS, read from what APNs or FCM delivered (docs/api.md, "What a device
/// receives"; docs/privacy.md for the private modes).
///
/// ```swift
/// // In a UNNotificationServiceExtension:
/// let push = try ENSPush(userInfo: request.content.userInfo)
/// if let content = await push.content(using: client) { show(content) }
/// ```
public struct ENSPush: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// New mail.
        case newMail
        /// The subscription ended (`"action": "resubscribe"`): register again.
        case resubscribe
    }

    public let kind: Kind
    /// The mode the push was made in (`ens.privacy`; `preview` when absent).
    public let mode: ENSPrivacyMode
    /// The notification id (`ens.id`; FCM `id`, or `notificationId`).
    public let id: String?
    /// The server's time when it was made (`ens.ts`), milliseconds since the epoch:
    /// keep the newest for ``ENSClient/checkIn(user:token:lastNotificationTimestamp:lastMessageDate:credentials:)``.
    public let timestamp: Int64?
    /// The device's `pushTag` (`ens.tag`), in every mode but `preview`.
    public let tag: String?
    /// The user (`ens.userid`), in `preview` pushes only.
    public let userID: String?
    /// The badge in clear (`preview` and `generic`).
    public let badge: Int?
    /// The sync key in clear (`preview` only).
    public let syncKey: ENSSyncKey?
    /// The alert's title and body as delivered (for `preview`, sender and subject).
    public let title: String?
    public let body: String?
    /// `ens.enc` (an `encrypted` push), decoded.
    public let encryptedContent: Data?
    /// Microsoft Graph's encrypted resource data (`ens.blind`; FCM `blind`, JSON text).
    /// A `blind` push without it would not have fit: ``blindMessage(using:)`` fetches it.
    public let blind: BlindContent?

    /// The time of ``timestamp``.
    public var time: Date? { timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) } }

    /// Reads an APNs payload (the `userInfo` of a notification: `aps`, `ens` and the
    /// sync-key pair) or an FCM message's `data` (string values; with the Firebase SDK
    /// on iOS, the same dictionary). For FCM, pass the message's `notification` title and
    /// body, which `preview` and `generic` messages carry outside `data`.
    public init(userInfo: [AnyHashable: Any], notificationTitle: String? = nil, notificationBody: String? = nil) throws(ENSPushError) {
        var members: [String: Any] = [:]
        for (key, value) in userInfo { if let key = key as? String { members[key] = value } }
        if let aps = members["aps"] as? [String: Any], let ens = members["ens"] as? [String: Any] {
            try self.init(ens: ens, badge: aps["badge"], alert: aps["alert"], syncKey: members["backgroundSyncKey"],
                          syncKeyExpiration: members["syncKeyExpirationTime"], fallbackID: nil)
        } else if members["aps"] == nil, members["notificationId"] != nil || members["id"] != nil {
            var alert: [String: Any] = [:]
            alert["title"] = notificationTitle
            alert["body"] = notificationBody
            try self.init(ens: members, badge: members["badge"], alert: alert.isEmpty ? nil : alert, syncKey: members["backgroundSyncKey"],
                          syncKeyExpiration: members["syncKeyExpirationTime"], fallbackID: members["notificationId"])
        } else {
            throw .notENS
        }
    }

    private init(ens: [String: Any], badge: Any?, alert: Any?, syncKey: Any?, syncKeyExpiration: Any?, fallbackID: Any?) throws(ENSPushError) {
        switch ens["action"] {
        case nil: kind = .newMail
        case let action as String where action == "resubscribe": kind = .resubscribe
        default: throw .malformed("action")
        }
        switch ens["privacy"] {
        case nil: mode = .preview
        case let name as String:
            guard let parsed = ENSPrivacyMode(rawValue: name) else { throw .malformed("privacy") }
            mode = parsed
        default: throw .malformed("privacy")
        }
        let identifier = ens["id"] ?? fallbackID
        if let identifier {
            guard let text = identifier as? String, (1...64).contains(text.utf8.count), text.utf8.allSatisfy({ Hex.isDigit($0) }) else {
                throw .malformed("id")
            }
            id = text
        } else {
            guard kind == .resubscribe else { throw .notENS }
            id = nil
        }
        if let ts = ens["ts"] {
            guard let value = JSON.int64(ts), value > 0 else { throw .malformed("ts") }
            timestamp = value
        } else {
            timestamp = nil
        }
        if let tag = ens["tag"] {
            guard let text = tag as? String, !text.isEmpty, text.utf8.count <= 64 else { throw .malformed("tag") }
            self.tag = text
        } else {
            tag = nil
        }
        if let userID = ens["userid"] {
            guard let text = userID as? String, let user = ENSUser(userID: text) else { throw .malformed("userid") }
            self.userID = user.userID
        } else {
            userID = nil
        }
        guard tag != nil || userID != nil else { throw .malformed("neither tag nor userid") }
        if let badge {
            guard let value = JSON.int64(badge), value >= 0 else { throw .malformed("badge") }
            self.badge = Int(value)
        } else {
            self.badge = nil
        }
        if let key = syncKey {
            guard let key = key as? String, let expiration = syncKeyExpiration as? String else { throw .malformed("backgroundSyncKey") }
            self.syncKey = ENSSyncKey(key: key, expirationText: expiration)
        } else {
            self.syncKey = nil
        }
        switch alert {
        case let object as [String: Any]:
            title = object["title"] as? String
            body = object["body"] as? String
        case let text as String:
            title = nil
            body = text
        default:
            title = nil
            body = nil
        }
        if let enc = ens["enc"] {
            guard let text = enc as? String, let data = Data(base64Encoded: text) else { throw .malformed("enc") }
            encryptedContent = data
        } else {
            encryptedContent = nil
        }
        guard mode != .encrypted || kind == .resubscribe || encryptedContent != nil else { throw .malformed("encrypted without enc") }
        guard let blind = BlindContent.fromPush(ens["blind"]) else { throw .malformed("blind") }
        self.blind = blind
    }

    /// A `preview` push's content, straight from the alert: sender and subject.
    public var previewContent: ENSNotificationContent? {
        guard kind == .newMail, mode == .preview, let title, let body else { return nil }
        return ENSNotificationContent(sender: title, subject: body, badge: badge, syncKey: syncKey)
    }

    /// An `encrypted` push's content, opened with the device's key.
    public func decryptedContent(with key: ENSPreviewKey) throws(ENSPushError) -> ENSNotificationContent {
        guard let encryptedContent, let id else { throw .wrongMode }
        let plaintext: Data
        do {
            plaintext = try PreviewDecryption.open(encryptedContent, id: id, with: key)
        } catch {
            throw .doesNotOpen
        }
        guard let object = JSON.object(plaintext), let content = ENSNotificationContent(object: object) else { throw .doesNotOpen }
        return content
    }

    /// A blind push's content, opened with the device's RSA key.
    public func blindContent(with key: ENSBlindKey) throws(ENSPushError) -> ENSNotificationContent {
        guard let blind else { throw .wrongMode }
        do {
            return try blind.content(with: key)
        } catch {
            throw .doesNotOpen
        }
    }

    /// A blind push's message, opened with the one of `keys` (``ENSClient/blindKeys(for:)``)
    /// whose certificate `ens.blind` names.
    public func blindMessage(with keys: [ENSBlindKey]) throws(ENSPushError) -> ENSBlindMessage {
        guard let blind else { throw .wrongMode }
        do {
            return try blind.message(with: keys)
        } catch {
            throw .doesNotOpen
        }
    }

    /// A `blind` push's message, as a Notification Service Extension opens it: the
    /// user's keys from the client's key store (the current one and those a rotation
    /// retired), the one picked by `encryptionCertificateId`; a push that came without
    /// `ens.blind` (too big for a push) is fetched once from ENS (`/getnotification`)
    /// with the registered token, still encrypted, and opened the same way. Nil when it
    /// does not open or ENS has nothing for it (more mail than the per-minute cap).
    public func blindMessage(using client: ENSClient) async -> ENSBlindMessage? {
        guard kind == .newMail, mode == .blind, let user = user(using: client),
              let keys = try? client.blindKeys(for: user), !keys.isEmpty else { return nil }
        var content = blind
        if content == nil {
            guard let id, let token = try? client.registeredToken(for: user) else { return nil }
            content = (try? await client.getBlindNotification(user: user, token: token, id: id)) ?? nil
        }
        return try? content?.message(with: keys)
    }

    /// A `secure` push's content, fetched once from ENS (`/getnotification`) by the
    /// device `token` of `user`. Nil when ENS has none (already fetched, expired).
    public func fetchContent(using client: ENSClient, user: ENSUser, token: ENSPushToken) async throws(ENSError) -> ENSNotificationContent? {
        guard let id else { throw .invalidArgument("the push has no notification id") }
        return try await client.getNotification(user: user, token: token, id: id)
    }

    /// The user the push is for, as far as this device knows: `ens.userid`, or the
    /// owner of `ens.tag` in the client's key store.
    public func user(using client: ENSClient) -> ENSUser? {
        if let userID { return ENSUser(userID: userID) }
        guard let tag else { return nil }
        return (try? client.user(forPushTag: tag)) ?? nil
    }

    /// What a Notification Service Extension shows, whatever the mode: the preview; the
    /// `encrypted` content opened with the user's key; the `secure` content fetched with
    /// the registered token; the `blind` content opened with the user's RSA key for its
    /// certificate (``blindMessage(using:)``). Nil when there is nothing more to show
    /// than the generic alert (a `generic` push, a resubscribe, or content that does not
    /// open or fetch).
    public func content(using client: ENSClient) async -> ENSNotificationContent? {
        guard kind == .newMail else { return nil }
        if let preview = previewContent { return preview }
        guard let user = user(using: client) else { return nil }
        switch mode {
        case .blind:
            return await blindMessage(using: client)?.content
        case .encrypted:
            guard let key = try? client.previewKey(for: user) else { return nil }
            return try? decryptedContent(with: key)
        case .secure:
            guard let token = try? client.registeredToken(for: user) else { return nil }
            return (try? await fetchContent(using: client, user: user, token: token)) ?? nil
        case .preview, .generic:
            return nil
        }
    }
}
