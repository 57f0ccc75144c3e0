import Foundation

// ENSKit's side of ENS's wire (docs/api.md, docs/openapi.yaml): one Encodable type per
// request body and per sealed object, one Decodable type per answer. The member names
// are the contract's, spelled as it spells them; a member ENSKit does not know is
// ignored (Decodable's default), and one it needs that is missing or of the wrong type
// is an `unexpectedAnswer` ENSError that names it.

// MARK: Coding

enum WireJSON {
    /// Sorted keys and unescaped slashes, as ENSKit always sent them: the same object
    /// gives the same bytes, and a URL stays readable.
    static func encode<T: Encodable>(_ value: T) throws(ENSError) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            return try encoder.encode(value)
        } catch {
            throw .invalidArgument("a value that is not JSON")
        }
    }

    /// `T` from `data`, or what is wrong with it, in words (``describe(_:)``).
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(WireDecodingFailure) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch {
            throw WireDecodingFailure(description: describe(error))
        }
    }

    /// Whether `data` is one JSON object (whatever its members).
    static func isObject(_ data: Data) -> Bool {
        (try? JSONDecoder().decode(AnyJSONObject.self, from: data)) != nil
    }

    /// A decoding error as the member it is about: `'content.sender' is missing`.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "not JSON" }
        func path(_ keys: [any CodingKey]) -> String {
            keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "'\(path(context.codingPath + [key]))' is missing"
        case .valueNotFound(_, let context):
            return "'\(path(context.codingPath))' is null"
        case .typeMismatch(_, let context):
            return context.codingPath.isEmpty ? "not a JSON object" : "'\(path(context.codingPath))' has the wrong type"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "not JSON" : "'\(path(context.codingPath))' is malformed"
        @unknown default:
            return "not ENS's JSON"
        }
    }
}

/// What is wrong with an answer or a stored item, in words.
struct WireDecodingFailure: Error, CustomStringConvertible {
    let description: String
}

/// Any JSON object: decodes when the value is an object, whatever its members.
struct AnyJSONObject: Decodable {
    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        _ = try decoder.container(keyedBy: AnyKey.self)
    }
}

/// An integer member, whether JSON carries it as a number (an integral one) or, FCM's
/// rule for `data`, as a string of digits.
struct JSONInteger: Codable, Equatable {
    let value: Int64

    init(_ value: Int64) { self.value = value }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(Int64.self) {
            self.value = value
        } else if let text = try? container.decode(String.self), let value = Int64(text) {
            self.value = value
        } else if let double = try? container.decode(Double.self), double.rounded() == double, abs(double) < 9.0e15 {
            value = Int64(double)
        } else {
            throw DecodingError.typeMismatch(Int64.self, .init(codingPath: decoder.codingPath, debugDescription: "not an integer"))
        }
    }

    /// Always as a number.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }
}

extension KeyedDecodingContainer {
    /// A privacy mode ENSKit knows, or a `dataCorrupted` error naming the member.
    func decodePrivacyMode(forKey key: Key) throws -> ENSPrivacyMode {
        let name = try decode(String.self, forKey: key)
        guard let mode = ENSPrivacyMode(rawValue: name) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "an unknown privacy mode")
        }
        return mode
    }

    func decodePrivacyModeIfPresent(forKey key: Key) throws -> ENSPrivacyMode? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        return try decodePrivacyMode(forKey: key)
    }
}

// MARK: Request bodies (clear parameters; sealed ones are base64 strings)

/// A request body: the endpoint's clear parameters as one JSON object.
protocol ENSRequestBody: Encodable {
    /// The blind mode's certificate, when the body carries it: ENS words the 400s about
    /// it (``ENSClient``'s error mapping).
    var privacyCertificate: String? { get }
}

extension ENSRequestBody {
    var privacyCertificate: String? { nil }
}

/// `/getpublickey`.
struct PublicKeyRequest: ENSRequestBody {
    let userid: String
    let email: String?
}

/// `/registerdevicev2`: `creds` sealed (``RegistrationCreds``).
struct RegistrationRequest: ENSRequestBody {
    let userid: String
    let email: String
    let bundleid: String
    /// `0` or `1`.
    let force: Int
    let exchVersion: Int?
    let defaultSound: String?
    let ewsDeviceId: String?
    /// With privacy `blind` only: base64 of the certificate's DER form.
    let privacyCertificate: String?
    let creds: String
}

/// `/getsubscriptionstatus` (v1): the user alone (`lastMessageDate` is no longer compared).
struct CheckInV1Request: ENSRequestBody {
    let userid: String
}

/// `/getsubscriptionstatusv2`: `subscriptionPayload` sealed (``CheckInPayload``), and
/// with new credentials `creds` sealed (``CheckInCreds``) and the mailbox's `email`.
struct CheckInRequest: ENSRequestBody {
    let userid: String
    let email: String?
    let subscriptionPayload: String
    let creds: String?
}

/// `/unregister` and `/updatedevice`: `token` sealed (``UnregisterToken``,
/// ``UpdateDeviceToken``).
struct SealedTokenRequest: ENSRequestBody {
    let userid: String
    let token: String
}

/// `/updatesynckey`, `/updateprivacy`, `/getnotification`, `/getnotificationhistory`,
/// `/marknotificationsread`: `info` sealed; `/updateprivacy` with `blind` also the
/// certificate in clear.
struct SealedInfoRequest: ENSRequestBody {
    let userid: String
    let info: String
    var privacyCertificate: String? = nil
}

// MARK: Sealed objects

/// A sealed object bound to its use (docs/api.md, "Sealed values"): the payload's
/// members with `purpose` and `sealedAt` beside them.
struct Bound<Payload: Encodable>: Encodable {
    let payload: Payload
    /// `<endpoint>.<parameter>`.
    let purpose: String
    /// Milliseconds since the epoch.
    let sealedAt: Int64

    private enum CodingKeys: String, CodingKey { case purpose, sealedAt }

    func encode(to encoder: any Encoder) throws {
        try payload.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(purpose, forKey: .purpose)
        try container.encode(sealedAt, forKey: .sealedAt)
    }
}

/// A push token in a sealed object: `apnsToken` or `fcmToken`, exactly one.
struct TokenMember: Encodable, Equatable {
    let apnsToken: String?
    let fcmToken: String?

    init(_ token: ENSPushToken) {
        switch token {
        case .apns(let hex): (apnsToken, fcmToken) = (hex, nil)
        case .fcm(let value): (apnsToken, fcmToken) = (nil, value)
        }
    }
}

/// The token being replaced in `/updatedevice`: `oldApnsToken` or `oldFcmToken`.
struct OldTokenMember: Encodable, Equatable {
    let oldApnsToken: String?
    let oldFcmToken: String?

    init(_ token: ENSPushToken) {
        switch token {
        case .apns(let hex): (oldApnsToken, oldFcmToken) = (hex, nil)
        case .fcm(let value): (oldApnsToken, oldFcmToken) = (nil, value)
        }
    }
}

/// One way of signing in to the mailbox, as `creds` carries it: exactly one of
/// `userName` and `password`, `oauthAccessToken` (with `oauthRefresh`), `CBAData`,
/// `graphAccessToken`.
struct CredentialMembers: Encodable, Equatable {
    var userName: String?
    var password: String?
    var oauthAccessToken: String?
    var oauthRefresh: OAuthRefreshMembers?
    var cbaData: CBADataMembers?
    var graphAccessToken: String?

    private enum CodingKeys: String, CodingKey {
        case userName, password, oauthAccessToken, oauthRefresh, cbaData = "CBAData", graphAccessToken
    }
}

/// `oauthRefresh`: `refreshToken`, `tokenEndpoint`, `clientId`, and `scope` when asked.
struct OAuthRefreshMembers: Encodable, Equatable {
    let refreshToken: String
    let tokenEndpoint: String
    let clientId: String
    let scope: String?
}

/// `CBAData`: base64 of the PKCS#12 bundle and its password.
struct CBADataMembers: Encodable, Equatable {
    let certificate: String
    let password: String
}

/// `/registerdevicev2`'s `creds`: the credentials, the token, where the mailbox is, the
/// device secret and the privacy mode.
struct RegistrationCreds: Encodable {
    let credentials: CredentialMembers
    let token: TokenMember
    var ewsUrl: String?
    var imapUrl: String?
    var deviceSecret: String?
    var privacy: String?
    /// With `encrypted`: base64 of the device's P-256 public key (X9.63).
    var privacyKey: String?
    /// With `blind`: hex SHA-256 of the certificate sent in clear.
    var privacyCertificateSHA256: String?

    private enum CodingKeys: String, CodingKey {
        case ewsUrl, imapUrl, deviceSecret, privacy, privacyKey, privacyCertificateSHA256
    }

    func encode(to encoder: any Encoder) throws {
        try credentials.encode(to: encoder)
        try token.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(ewsUrl, forKey: .ewsUrl)
        try container.encodeIfPresent(imapUrl, forKey: .imapUrl)
        try container.encodeIfPresent(deviceSecret, forKey: .deviceSecret)
        try container.encodeIfPresent(privacy, forKey: .privacy)
        try container.encodeIfPresent(privacyKey, forKey: .privacyKey)
        try container.encodeIfPresent(privacyCertificateSHA256, forKey: .privacyCertificateSHA256)
    }
}

/// `/getsubscriptionstatusv2`'s `creds`: the credentials and the device secret (no
/// token, no privacy members).
struct CheckInCreds: Encodable {
    let credentials: CredentialMembers
    let deviceSecret: String?

    private enum CodingKeys: String, CodingKey { case deviceSecret }

    func encode(to encoder: any Encoder) throws {
        try credentials.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(deviceSecret, forKey: .deviceSecret)
    }
}

/// `/getsubscriptionstatusv2`'s `subscriptionPayload`: the token and one of
/// `lastNotificationTs`, `lastMessageDate` and `ignoreLastMessageDate: 1`.
struct CheckInPayload: Encodable {
    let pushToken: String
    var lastNotificationTs: Int64?
    var lastMessageDate: String?
    var ignoreLastMessageDate: Int?
}

/// `/unregister`'s bound `token` object.
struct UnregisterToken: Encodable {
    let token: TokenMember
    let deviceSecret: String?

    private enum CodingKeys: String, CodingKey { case deviceSecret }

    func encode(to encoder: any Encoder) throws {
        try token.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(deviceSecret, forKey: .deviceSecret)
    }
}

/// `/updatedevice`'s bound `token` object: the old token, the new one, and the secret of
/// the device being renamed.
struct UpdateDeviceToken: Encodable {
    let old: OldTokenMember
    let new: TokenMember
    let deviceSecret: String?

    private enum CodingKeys: String, CodingKey { case deviceSecret }

    func encode(to encoder: any Encoder) throws {
        try old.encode(to: encoder)
        try new.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(deviceSecret, forKey: .deviceSecret)
    }
}

/// `/updatesynckey`'s `info`.
struct SyncKeyInfo: Encodable {
    let token: TokenMember
    let backgroundSyncKey: String
    /// `MM/dd/yyyy HH:mm:ss.SSS`, UTC.
    let syncKeyExpirationTime: String
    let deviceSecret: String?

    private enum CodingKeys: String, CodingKey { case backgroundSyncKey, syncKeyExpirationTime, deviceSecret }

    func encode(to encoder: any Encoder) throws {
        try token.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(backgroundSyncKey, forKey: .backgroundSyncKey)
        try container.encode(syncKeyExpirationTime, forKey: .syncKeyExpirationTime)
        try container.encodeIfPresent(deviceSecret, forKey: .deviceSecret)
    }
}

/// `/updateprivacy`'s `info`.
struct PrivacyInfo: Encodable {
    let pushToken: String
    let deviceSecret: String
    let privacy: String
    var privacyKey: String?
    var privacyCertificateSHA256: String?
}

/// `/getnotification`'s `info`.
struct NotificationInfo: Encodable {
    let pushToken: String
    let deviceSecret: String
    let id: String
}

/// `/getnotificationhistory`'s `info`.
struct HistoryInfo: Encodable {
    let pushToken: String
    let deviceSecret: String
    let limit: Int?
}

/// `/marknotificationsread`'s `info`.
struct MarkReadInfo: Encodable {
    let pushToken: String
    let deviceSecret: String
    let ids: [String]
}

// MARK: Answers

/// What every answer of ENS has: `responseCode`, and for errors a `message` (and, for
/// the blind mode's 400s, `refusal`). The words are for people: a `message` or
/// `refusal` that is not a string is read as absent.
struct AnswerEnvelope: Decodable {
    let responseCode: String
    let message: String?
    let refusal: String?

    private enum CodingKeys: String, CodingKey { case responseCode, message, refusal }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        responseCode = try container.decode(String.self, forKey: .responseCode)
        message = (try? container.decodeIfPresent(String.self, forKey: .message)) ?? nil
        refusal = (try? container.decodeIfPresent(String.self, forKey: .refusal)) ?? nil
    }
}

/// `/getpublickey`: `pubKey` (PEM) and `userid`.
struct PublicKeyAnswer: Decodable {
    let pubKey: String
    let userid: String
}

/// `/registerdevicev2`'s success: `pushTag` (16 printable characters, no `/`) and, when
/// a mode was asked for, `privacy`.
struct RegistrationAnswer: Decodable {
    let pushTag: String?
    let privacy: ENSPrivacyMode?

    private enum CodingKeys: String, CodingKey { case pushTag, privacy }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let tag = try container.decodeIfPresent(String.self, forKey: .pushTag)
        if let tag, tag.utf8.count != 16 || !tag.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x2F }) {
            throw DecodingError.dataCorruptedError(forKey: .pushTag, in: container, debugDescription: "not 16 printable characters")
        }
        pushTag = tag
        privacy = try container.decodePrivacyModeIfPresent(forKey: .privacy)
    }
}

/// `/getsubscriptionstatusv2`: `credentials` (`Stored` or `Unused`) when it carried some.
struct CheckInAnswer: Decodable {
    let credentials: ENSCheckInResult.Credentials?

    private enum CodingKeys: String, CodingKey { case credentials }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let text = try container.decodeIfPresent(String.self, forKey: .credentials) else {
            credentials = nil
            return
        }
        guard let value = ENSCheckInResult.Credentials(rawValue: text) else {
            throw DecodingError.dataCorruptedError(forKey: .credentials, in: container, debugDescription: "neither Stored nor Unused")
        }
        credentials = value
    }
}

/// `/updateprivacy`'s `UpdateSuccess`: the mode the device's pushes now use.
struct PrivacyAnswer: Decodable {
    let privacy: ENSPrivacyMode

    private enum CodingKeys: String, CodingKey { case privacy }

    init(from decoder: any Decoder) throws {
        privacy = try decoder.container(keyedBy: CodingKeys.self).decodePrivacyMode(forKey: .privacy)
    }
}

/// `/getnotification`'s `NotificationFound`: the id asked for and its content.
struct NotificationAnswer<Content: Decodable>: Decodable {
    let id: String
    let content: Content
}

/// A notification's content as ENS seals it into an `encrypted` push and serves it from
/// `/getnotification`: `sender`, `subject`, and when known `badge` and the sync key pair.
struct NotificationContentBody: Decodable {
    let sender: String
    let subject: String
    let badge: JSONInteger?
    /// `backgroundSyncKey` with its `syncKeyExpirationTime`: both or neither.
    let syncKey: ENSSyncKey?

    private enum CodingKeys: String, CodingKey { case sender, subject, badge, backgroundSyncKey, syncKeyExpirationTime }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sender = try container.decode(String.self, forKey: .sender)
        subject = try container.decode(String.self, forKey: .subject)
        let badge = try container.decodeIfPresent(JSONInteger.self, forKey: .badge)
        if let badge, Int(exactly: badge.value) == nil {
            throw DecodingError.dataCorruptedError(forKey: .badge, in: container, debugDescription: "out of range")
        }
        self.badge = badge
        if let key = try container.decodeIfPresent(String.self, forKey: .backgroundSyncKey) {
            syncKey = ENSSyncKey(key: key, expirationText: try container.decode(String.self, forKey: .syncKeyExpirationTime))
        } else {
            syncKey = nil
        }
    }

    var content: ENSNotificationContent {
        ENSNotificationContent(sender: sender, subject: subject, badge: badge.flatMap { Int(exactly: $0.value) }, syncKey: syncKey)
    }
}

/// Graph's encrypted resource data as `ens.blind` (or `/getnotification`'s `content`)
/// carries it.
struct BlindContentBody: Decodable {
    let data: String
    let dataKey: String
    let dataSignature: String
    let encryptionCertificateId: String
    let encryptionCertificateThumbprint: String
    let id: String?

    var content: BlindContent {
        BlindContent(data: data, dataKey: dataKey, dataSignature: dataSignature, encryptionCertificateID: encryptionCertificateId,
                     encryptionCertificateThumbprint: encryptionCertificateThumbprint, messageID: id)
    }
}

/// `/getnotificationhistory`'s `NotificationHistory`.
struct HistoryAnswer: Decodable {
    let notifications: [Entry]

    struct Entry: Decodable {
        let id: String
        let ts: JSONInteger
        let sender: String
        let subject: String
        /// `0` or `1`.
        let read: Bool

        private enum CodingKeys: String, CodingKey { case id, ts, sender, subject, read }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try container.decode(String.self, forKey: .id)
            ts = try container.decode(JSONInteger.self, forKey: .ts)
            sender = try container.decode(String.self, forKey: .sender)
            subject = try container.decode(String.self, forKey: .subject)
            switch try container.decode(JSONInteger.self, forKey: .read).value {
            case 0: read = false
            case 1: read = true
            default: throw DecodingError.dataCorruptedError(forKey: .read, in: container, debugDescription: "neither 0 nor 1")
            }
        }

        var entry: ENSHistoryEntry {
            ENSHistoryEntry(id: id, timestamp: ts.value, sender: sender, subject: subject, isRead: read)
        }
    }
}

/// `/marknotificationsread`'s `UpdateSuccess`: how many were newly marked.
struct MarkReadAnswer: Decodable {
    let marked: Int64

    private enum CodingKeys: String, CodingKey { case marked }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        marked = try container.decode(JSONInteger.self, forKey: .marked).value
        guard marked >= 0 else { throw DecodingError.dataCorruptedError(forKey: .marked, in: container, debugDescription: "negative") }
    }
}
