internal import Codecs
internal import ENSModel

/// One push from a Dovecot server's plugin, as its body says it (docs/dovecot.md): the
/// ox driver's PUT and ENS's Lua script's POST carry the same JSON object,
///
///     {"user":"<routing token>","event":"messageNew","folder":"INBOX",
///      "imap-uidvalidity":1795932928,"imap-uid":3,"from":"<raw From>",
///      "subject":"<raw Subject>","snippet":"…","unseen":3}
///
/// (the Lua script also sends "username", the account's login). From and Subject arrive
/// raw, folded and RFC 2047-encoded, and untruncated; they are decoded and cut here.
/// The snippet, message content, is never read.
public struct DovecotEvent: Sendable, Equatable {
    public let token: String
    /// Only `messageNew` into INBOX is new mail; anything else is answered and ignored.
    public let isNewMailInInbox: Bool
    public let uidValidity: UInt32
    public let uid: UInt32
    /// The account's login as the server knows it, when the push says (the Lua script).
    public let userName: String?
    public let senderName: String
    public let subject: String
    public let unseen: Int?

    /// What the decoded From and Subject are cut to: a notification shows a line or two.
    static let textLimit = 256

    public struct Malformed: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    public init(body: [UInt8]) throws(Malformed) {
        let fields: [String: JSONValue]
        do {
            guard case .object(let members) = try JSONParser.parse(body, maximumDepth: 4) else { throw Malformed(description: "not a JSON object") }
            fields = members
        } catch let malformed as Malformed {
            throw malformed
        } catch {
            throw Malformed(description: "not JSON: \(error)")
        }
        func text(_ name: String) throws(Malformed) -> String? {
            guard let value = fields[name] else { return nil }
            guard case .string(let text) = value else { throw Malformed(description: "\(name) is not a string") }
            return text
        }
        func number(_ name: String) throws(Malformed) -> UInt32? {
            guard let value = fields[name] else { return nil }
            guard case .number(let digits) = value, let number = UInt32(digits) else { throw Malformed(description: "\(name) is not a 32-bit " +
                                                                                                                    "unsigned number") }
            return number
        }
        guard let token = try text("user"), !token.isEmpty, token.utf8.count <= 128 else {
            throw Malformed(description: "user (the routing token) is missing")
        }
        guard let event = try text("event") else { throw Malformed(description: "event is missing") }
        guard let uidValidity = try number("imap-uidvalidity"), let uid = try number("imap-uid") else {
            throw Malformed(description: "imap-uidvalidity or imap-uid is missing")
        }
        self.token = token
        // The documentation says "MessageNew", the code sends "messageNew".
        let folder = try text("folder")
        isNewMailInInbox = event.lowercased() == "messagenew" && folder == "INBOX"
        self.uidValidity = uidValidity
        self.uid = uid
        userName = try text("username").flatMap { $0.isEmpty || $0.utf8.count > 320 ? nil : $0 }
        senderName = Self.senderName(from: try text("from") ?? "")
        subject = MIMEHeader.decode(try text("subject") ?? "", limit: Self.textLimit)
        unseen = try number("unseen").map(Int.init)
    }

    /// The item id notification ids and collapse ids derive from: one per message.
    public var itemID: String { "\(uidValidity).\(uid)" }

    /// The name a notification shows for a From header: the first mailbox's display name,
    /// else its address. `"Müller, Jürgen" <j@x>` gives `Müller, Jürgen`.
    static func senderName(from raw: String) -> String {
        let decoded = MIMEHeader.decode(raw, limit: 1024)
        guard !decoded.isEmpty else { return "" }
        var name = decoded
        if let open = decoded.firstIndex(of: "<") {
            name = String(decoded[..<open])
            if name.trimmingCharacters(in: " ").isEmpty, let close = decoded[open...].firstIndex(of: ">") {
                name = String(decoded[decoded.index(after: open)..<close])
            }
        }
        name = name.trimmingCharacters(in: " ")
        if name.hasPrefix("\""), name.hasSuffix("\""), name.count >= 2 { name = String(name.dropFirst().dropLast()) }
        return MIMEHeader.cleaned(name.replacingBackslashEscapes(), limit: textLimit)
    }
}

extension String {
    /// A quoted string's `\"` and `\\` as the characters they stand for.
    func replacingBackslashEscapes() -> String {
        guard contains("\\") else { return self }
        var result = ""
        var escaped = false
        for character in self {
            if escaped || character != "\\" {
                result.append(character)
                escaped = false
            } else {
                escaped = true
            }
        }
        return result
    }
}
