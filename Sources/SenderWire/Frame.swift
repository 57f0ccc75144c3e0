/// The responders' Unix-socket protocol to ens-sender. Every frame:
///
///     "EN" | version (1 byte) | type (1 byte) | payload length (4 bytes, big-endian) | payload
///
/// A responder sends `submit` (payload: one `PushNotification` as JSON) and reads one
/// answer: `accepted` only once the notification is durably spooled, or `refused` with a
/// reason (`spool-full`, `bad-frame`, `bad-version`, `bad-notification`, `io-error`).
public struct Frame: Sendable, Equatable {
    public static let version: UInt8 = 1
    public static let headerSize = 8
    public static let maximumPayload = 64 * 1024

    public enum Kind: UInt8, Sendable {
        case submit = 1
        case accepted = 2
        case refused = 3
    }

    public let kind: Kind
    public let payload: [UInt8]

    public init(kind: Kind, payload: [UInt8]) {
        self.kind = kind
        self.payload = payload
    }

    public var encoded: [UInt8] {
        let length = UInt32(payload.count)
        return [UInt8(ascii: "E"), UInt8(ascii: "N"), Self.version, kind.rawValue,
                UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + payload
    }
}

/// Why a byte stream is not a frame stream. The connection is answered `refused` and
/// closed; nothing else happens.
public enum FrameError: Error, Sendable, Equatable, CustomStringConvertible {
    case badMagic
    case unsupportedVersion(UInt8)
    case unknownKind(UInt8)
    case tooLarge(Int)

    public var description: String {
        switch self {
        case .badMagic: "not an ENS frame"
        case .unsupportedVersion(let version): "unsupported frame version \(version)"
        case .unknownKind(let kind): "unknown frame type \(kind)"
        case .tooLarge(let size): "frame payload of \(size) bytes exceeds \(Frame.maximumPayload)"
        }
    }

    /// The `refused` reason sent back for this error.
    public var reason: String {
        if case .unsupportedVersion = self { return "bad-version" }
        return "bad-frame"
    }
}

/// Reassembles frames from whatever chunks the socket delivers (a pure state machine:
/// bytes in, frames out).
public struct FrameDecoder: Sendable {
    private var buffer: [UInt8] = []

    public init() {}

    public mutating func append(_ bytes: some Sequence<UInt8>) {
        buffer.append(contentsOf: bytes)
    }

    /// No bytes waiting to complete a frame.
    public var isEmpty: Bool { buffer.isEmpty }

    /// The next complete frame, nil if more bytes are needed; throws on garbage.
    public mutating func next() throws(FrameError) -> Frame? {
        guard buffer.count >= 2 else { return nil }
        guard buffer[0] == UInt8(ascii: "E"), buffer[1] == UInt8(ascii: "N") else { throw .badMagic }
        guard buffer.count >= 3 else { return nil }
        guard buffer[2] == Frame.version else { throw .unsupportedVersion(buffer[2]) }
        guard buffer.count >= Frame.headerSize else { return nil }
        guard let kind = Frame.Kind(rawValue: buffer[3]) else { throw .unknownKind(buffer[3]) }
        let length = Int(buffer[4]) << 24 | Int(buffer[5]) << 16 | Int(buffer[6]) << 8 | Int(buffer[7])
        guard length <= Frame.maximumPayload else { throw .tooLarge(length) }
        guard buffer.count >= Frame.headerSize + length else { return nil }
        let payload = Array(buffer[Frame.headerSize..<(Frame.headerSize + length)])
        buffer.removeFirst(Frame.headerSize + length)
        return Frame(kind: kind, payload: payload)
    }
}
