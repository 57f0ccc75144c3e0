/// A device's push token and the push service it belongs to.
///
/// - APNs tokens are 8–100 bytes, written as hex (any case on input, lowercase kept).
///   iOS apps that send `NSData.description` write them as `<a1b2c3d4 e5f60718 …>`:
///   the angle brackets and spaces are dropped.
/// - FCM registration tokens are opaque text of Google's alphabet (letters, digits,
///   `-`, `_`, `:`), kept as given. A device names one as `fcm:<token>` wherever a
///   token travels as a bare string, or in a `fcmToken` member of a sealed object.
public struct DeviceToken: Sendable, Equatable, Hashable {
    /// The push services ENS can deliver to; a token is delivered by its own.
    public enum Provider: String, Sendable, CaseIterable {
        case apns
        case fcm
    }

    public let provider: Provider
    /// The token as its push service knows it: lowercase hex (APNs), the registration
    /// token (FCM).
    public let value: String

    /// An APNs token in hex (or `<…>`) form.
    public init?(hex text: String) {
        // Byte by byte: every token the responder reads back and every push the sender
        // takes in passes here, and the usual form (lowercase hex, as stored) is kept
        // as it is, without a copy.
        let utf8 = text.utf8
        var start = utf8.startIndex, end = utf8.endIndex
        if utf8.first == UInt8(ascii: "<") && utf8.last == UInt8(ascii: ">") && utf8.count >= 2 {
            start = utf8.index(after: start)
            end = utf8.index(before: end)
        }
        var digits = 0, canonical = start == utf8.startIndex
        for byte in utf8[start..<end] {
            switch byte {
            case 0x30...0x39, 0x61...0x66: digits += 1
            case 0x41...0x46: digits += 1; canonical = false
            case 0x20: canonical = false
            default: return nil
            }
        }
        guard digits >= 16, digits <= 200, digits % 2 == 0 else { return nil }
        provider = .apns
        if canonical {
            value = text
        } else {
            var lower: [UInt8] = []
            lower.reserveCapacity(digits)
            for byte in utf8[start..<end] where byte != 0x20 {
                lower.append(byte >= 0x41 && byte <= 0x46 ? byte + 0x20 : byte)
            }
            value = String(decoding: lower, as: UTF8.self)
        }
    }

    /// An FCM registration token: 20 to 4096 characters of letters, digits, `-`, `_`
    /// and `:` (Google documents no fixed length; today's tokens are ~160).
    public init?(fcm text: String) {
        guard text.utf8.count >= 20, text.utf8.count <= 4096, text.utf8.allSatisfy(Self.isFCMCharacter) else { return nil }
        provider = .fcm
        value = text
    }

    /// A token a device sent as a bare string: `fcm:<token>` is FCM's, anything else
    /// must be an APNs token (what every client sent before FCM).
    public init?(sent text: String) {
        if text.hasPrefix(Self.fcmPrefix) {
            self.init(fcm: String(text.dropFirst(Self.fcmPrefix.count)))
        } else {
            self.init(hex: text)
        }
    }

    /// The form kept sealed in the database and hashed for lookups: the hex of an APNs
    /// token (as before FCM, so existing rows keep their hashes), `fcm:<token>` for FCM.
    public var storedForm: String {
        provider == .fcm ? Self.fcmPrefix + value : value
    }

    public init?(storedForm text: String) {
        self.init(sent: text)
    }

    public static let fcmPrefix = "fcm:"

    private static func isFCMCharacter(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":")
    }
}
