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
        let members = PushValue.members(of: userInfo)
        if case .object(let aps)? = members["aps"], case .object(let ens)? = members["ens"] {
            try self.init(ens: ens, badge: aps["badge"], alert: aps["alert"], syncKey: members["backgroundSyncKey"],
                          syncKeyExpiration: members["syncKeyExpirationTime"], fallbackID: nil)
        } else if members["aps"] == nil, members["notificationId"] != nil || members["id"] != nil {
            var alert: [String: PushValue] = [:]
            alert["title"] = notificationTitle.map(PushValue.string)
            alert["body"] = notificationBody.map(PushValue.string)
            try self.init(ens: members, badge: members["badge"], alert: alert.isEmpty ? nil : .object(alert), syncKey: members["backgroundSyncKey"],
                          syncKeyExpiration: members["syncKeyExpirationTime"], fallbackID: members["notificationId"])
        } else {
            throw .notENS
        }
    }

    private init(ens: [String: PushValue], badge: PushValue?, alert: PushValue?, syncKey: PushValue?, syncKeyExpiration: PushValue?,
                 fallbackID: PushValue?) throws(ENSPushError) {
        switch ens["action"] {
        case nil: kind = .newMail
        case .string("resubscribe")?: kind = .resubscribe
        default: throw .malformed("action")
        }
        switch ens["privacy"] {
        case nil: mode = .preview
        case .string(let name)?:
            guard let parsed = ENSPrivacyMode(rawValue: name) else { throw .malformed("privacy") }
            mode = parsed
        default: throw .malformed("privacy")
        }
        if let identifier = ens["id"] ?? fallbackID {
            guard case .string(let text) = identifier, (1...64).contains(text.utf8.count), text.utf8.allSatisfy({ Hex.isDigit($0) }) else {
                throw .malformed("id")
            }
            id = text
        } else {
            guard kind == .resubscribe else { throw .notENS }
            id = nil
        }
        if let ts = ens["ts"] {
            guard let value = ts.int64, value > 0 else { throw .malformed("ts") }
            timestamp = value
        } else {
            timestamp = nil
        }
        if let tag = ens["tag"] {
            guard case .string(let text) = tag, !text.isEmpty, text.utf8.count <= 64 else { throw .malformed("tag") }
            self.tag = text
        } else {
            tag = nil
        }
        if let userID = ens["userid"] {
            guard case .string(let text) = userID, let user = ENSUser(userID: text) else { throw .malformed("userid") }
            self.userID = user.userID
        } else {
            userID = nil
        }
        guard tag != nil || userID != nil else { throw .malformed("neither tag nor userid") }
        if let badge {
            guard let value = badge.int64, value >= 0, let count = Int(exactly: value) else { throw .malformed("badge") }
            self.badge = count
        } else {
            self.badge = nil
        }
        if let syncKey {
            guard case .string(let key) = syncKey, case .string(let expiration)? = syncKeyExpiration else { throw .malformed("backgroundSyncKey") }
            self.syncKey = ENSSyncKey(key: key, expirationText: expiration)
        } else {
            self.syncKey = nil
        }
        switch alert {
        case .object(let object)?:
            if case .string(let text)? = object["title"] { title = text } else { title = nil }
            if case .string(let text)? = object["body"] { body = text } else { body = nil }
        case .string(let text)?:
            title = nil
            body = text
        default:
            title = nil
            body = nil
        }
        if let enc = ens["enc"] {
            guard case .string(let text) = enc, let data = Data(base64Encoded: text) else { throw .malformed("enc") }
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
        guard let body = try? WireJSON.decode(NotificationContentBody.self, from: plaintext) else { throw .doesNotOpen }
        return body.content
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

/// A value of a push's `userInfo`, as the OS hands it over (a property-list dictionary
/// of strings, numbers, dictionaries and arrays; FCM `data` values are all strings),
/// typed once so that nothing below reads `Any`. Encodable as the JSON it stands for,
/// so a member that is an object (APNs `ens.blind`) decodes as its model.
enum PushValue: Encodable, Equatable {
    case string(String)
    case integer(Int64)
    case number(Double)
    case object([String: PushValue])
    case array([PushValue])
    case null
    /// Anything else (a date, data): never a value ENS sends.
    case unsupported

    /// The members of `userInfo` whose keys are strings.
    static func members(of userInfo: [AnyHashable: Any]) -> [String: PushValue] {
        var members: [String: PushValue] = [:]
        for (key, value) in userInfo {
            if let key = key.base as? String { members[key] = PushValue(value) }
        }
        return members
    }

    init(_ value: Any) {
        switch value {
        case let text as String: self = .string(text)
        case let number as Int: self = .integer(Int64(number))
        case let number as Int64: self = .integer(number)
        case let number as NSNumber:
            let double = number.doubleValue
            self = double.rounded() == double && abs(double) < 9.0e15 ? .integer(Int64(double)) : .number(double)
        case let number as Double: self = .number(number)
        case let object as [AnyHashable: Any]: self = .object(Self.members(of: object))
        case let array as [Any]: self = .array(array.map(PushValue.init))
        case is NSNull: self = .null
        default: self = .unsupported
        }
    }

    /// An integer, whether a number or (FCM's rule) a string of digits.
    var int64: Int64? {
        switch self {
        case .integer(let value): return value
        case .string(let text): return Int64(text)
        default: return nil
        }
    }

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .string(let text):
            var container = encoder.singleValueContainer()
            try container.encode(text)
        case .integer(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .number(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .object(let members):
            try members.encode(to: encoder)
        case .array(let values):
            try values.encode(to: encoder)
        case .null, .unsupported:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        }
    }
}
