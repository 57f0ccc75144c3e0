public import Foundation
internal import Crypto

/// A mail account as ENS knows it: the lowercase hex SHA-256 of the lowercased
/// address (docs/api.md, "Identity"), and the address itself where a call needs it
/// (`/registerdevicev2` and a new user's `/getpublickey`). ENS never stores the address.
public struct ENSUser: Sendable, Hashable {
    /// 64 lowercase hex digits.
    public let userID: String
    /// The address, when known.
    public let email: String?

    /// The user of this address; `userID` is computed as ENS computes it.
    public init(email: String) {
        self.email = email
        self.userID = Self.userID(for: email)
    }

    /// A user known by its id alone (from a push's `ens.userid`, say). Nil unless
    /// `userID` is 64 hex digits.
    public init?(userID: String) {
        let lowered = userID.lowercased()
        guard lowered.utf8.count == 64, lowered.utf8.allSatisfy({ Hex.isDigit($0) }) else { return nil }
        self.userID = lowered
        self.email = nil
    }

    /// `hex(SHA-256(UTF-8(lowercased(email))))`, as ENS's `Identity` derives it. Both
    /// sides lowercase with Swift's `String.lowercased()` (full Unicode case mapping), so
    /// a non-ASCII address gets the same id.
    public static func userID(for email: String) -> String {
        Hex.encode(Array(SHA256.hash(data: Data(email.lowercased().utf8))))
    }
}

enum Hex {
    static func isDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46)
    }

    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        let bytes = Array(text.utf8)
        guard bytes.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count / 2)
        var index = 0
        while index < bytes.count {
            guard let high = value(bytes[index]), let low = value(bytes[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    private static func value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: return byte - 0x30
        case 0x61...0x66: return byte - 0x61 + 10
        case 0x41...0x46: return byte - 0x41 + 10
        default: return nil
        }
    }
}

/// A device's push token: the APNs device token or the FCM registration token. ENS
/// tells the two apart by form (docs/api.md, "Device tokens").
public enum ENSPushToken: Sendable, Hashable, CustomStringConvertible {
    /// An APNs device token, as lowercase hex.
    case apns(String)
    /// An FCM registration token, as the Firebase SDK gives it.
    case fcm(String)

    /// The token of `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`.
    public init(apnsDeviceToken: Data) throws(ENSError) {
        try self.init(apnsHex: Hex.encode(apnsDeviceToken))
    }

    /// An APNs token as hex (16 to 200 digits), or as iOS prints it (`<a1b2c3d4 …>`).
    public init(apnsHex: String) throws(ENSError) {
        let hex = apnsHex.filter { $0 != "<" && $0 != ">" && $0 != " " }.lowercased()
        guard (16...200).contains(hex.utf8.count), hex.utf8.allSatisfy({ Hex.isDigit($0) }) else {
            throw .invalidArgument("an APNs token is 16 to 200 hex digits")
        }
        self = .apns(hex)
    }

    /// An FCM registration token: 20 to 4096 letters, digits, `-`, `_` and `:`.
    public init(fcmToken: String) throws(ENSError) {
        let allowed = fcmToken.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x3A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x2D || byte == 0x5F
        }
        guard (20...4096).contains(fcmToken.utf8.count), allowed else {
            throw .invalidArgument("an FCM registration token is 20 to 4096 letters, digits, '-', '_' and ':'")
        }
        self = .fcm(fcmToken)
    }

    /// The bare form (`pushToken`, `/unregister`'s bare token): the hex, or `fcm:<token>`.
    public var wireForm: String {
        switch self {
        case .apns(let hex): return hex
        case .fcm(let token): return "fcm:" + token
        }
    }

    /// The member that names it in a sealed object (`apnsToken` or `fcmToken`).
    var member: String {
        switch self {
        case .apns: return "apnsToken"
        case .fcm: return "fcmToken"
        }
    }

    /// The member for the token being replaced in `/updatedevice`.
    var oldMember: String {
        switch self {
        case .apns: return "oldApnsToken"
        case .fcm: return "oldFcmToken"
        }
    }

    var value: String {
        switch self {
        case .apns(let hex): return hex
        case .fcm(let token): return token
        }
    }

    /// Never the token itself: tokens are secrets in logs (docs/api.md).
    public var description: String {
        switch self {
        case .apns: return "ENSPushToken.apns(…)"
        case .fcm: return "ENSPushToken.fcm(…)"
        }
    }
}
