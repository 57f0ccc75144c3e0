internal import ENSModel

/// One POST from Graph to a notification URL: `{"value": [...]}`, each item a change
/// notification or a lifecycle event, possibly of different subscriptions (and tenants).
/// Items are read leniently where Graph varies (`Users/{id}/Messages/{id}` or
/// `Users('{id}')/messages('{id}')`, the casing of `@odata.type`) and strictly where
/// ENS relies on a value (ids and clientState are bounded, printable text). An item
/// that cannot be read is counted, not fatal: the rest of the batch still counts.
public struct ChangeNotificationBatch: Sendable, Equatable {
    public enum LifecycleEvent: String, Sendable {
        case reauthorizationRequired
        case subscriptionRemoved
        case missed
    }

    public enum Item: Sendable, Equatable {
        /// A message was created in the subscribed folder.
        case created(subscriptionID: String, clientState: String?, messageID: String)
        /// The same from a rich subscription: Graph's ciphertext of the selected
        /// properties, which only the holder of the certificate's key can open.
        case encrypted(subscriptionID: String, clientState: String?, messageID: String, content: EncryptedContent)
        case lifecycle(subscriptionID: String, clientState: String?, event: LifecycleEvent)

        public var subscriptionID: String {
            switch self {
            case .created(let id, _, _), .encrypted(let id, _, _, _), .lifecycle(let id, _, _): id
            }
        }

        public var clientState: String? {
            switch self {
            case .created(_, let state, _), .encrypted(_, let state, _, _), .lifecycle(_, let state, _): state
            }
        }
    }

    public let items: [Item]
    /// The batch's `validationTokens` (rich notifications): nil when the member is
    /// absent; an entry that is not a string (Graph sends null for a misconfigured
    /// application) makes `hasUnusableToken` true.
    public let validationTokens: [String]?
    public let hasUnusableToken: Bool
    /// Items that are not one of the above (another change type, a lifecycle event
    /// this build does not know, missing or malformed fields).
    public let unreadable: Int

    public struct Malformed: Error, Sendable, Equatable, CustomStringConvertible {
        public let problem: String
        public var description: String { problem }
    }

    /// The most items one batch may carry (Graph sends far fewer).
    static let maximumItems = 1000

    public init(json bytes: [UInt8]) throws(Malformed) {
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes)
        } catch {
            throw Malformed(problem: "not JSON (\(error.problem))")
        }
        guard case .array(let values)? = document["value"] else { throw Malformed(problem: "no value array") }
        guard values.count <= Self.maximumItems else { throw Malformed(problem: "more than \(Self.maximumItems) items") }
        var items: [Item] = []
        var unreadable = 0
        for value in values {
            if let item = Self.item(value) { items.append(item) } else { unreadable += 1 }
        }
        self.items = items
        self.unreadable = unreadable
        var unusable = false
        if let member = document["validationTokens"] {
            guard case .array(let entries) = member else { throw Malformed(problem: "validationTokens is not an array") }
            var tokens: [String] = []
            for entry in entries.prefix(ValidationTokens.maximumTokens) {
                if let token = entry.stringValue, !token.isEmpty { tokens.append(token) } else { unusable = true }
            }
            if entries.count > ValidationTokens.maximumTokens { unusable = true }
            validationTokens = tokens
        } else {
            validationTokens = nil
        }
        hasUnusableToken = unusable
    }

    private static func item(_ value: JSONValue) -> Item? {
        guard let subscriptionID = value["subscriptionId"]?.stringValue, isToken(subscriptionID, limit: 128) else { return nil }
        var clientState: String?
        if let state = value["clientState"] {
            guard let text = state.stringValue, text.utf8.count <= 255 else { return nil }
            clientState = text
        }
        if let event = value["lifecycleEvent"] {
            guard let name = event.stringValue, let known = LifecycleEvent(rawValue: name) else { return nil }
            return .lifecycle(subscriptionID: subscriptionID, clientState: clientState, event: known)
        }
        guard value["changeType"]?.stringValue?.lowercased() == "created", let messageID = messageID(of: value), isToken(messageID, limit: 512) else {
            return nil
        }
        if let encrypted = value["encryptedContent"] {
            guard let content = EncryptedContent(encrypted) else { return nil }
            return .encrypted(subscriptionID: subscriptionID, clientState: clientState, messageID: messageID, content: content)
        }
        return .created(subscriptionID: subscriptionID, clientState: clientState, messageID: messageID)
    }

    /// `resourceData.id`, else the last segment of `resource`.
    private static func messageID(of value: JSONValue) -> String? {
        if let id = value["resourceData"]?["id"]?.stringValue { return id }
        guard let resource = value["resource"]?.stringValue else { return nil }
        var last = Substring(resource.split(separator: "/").last ?? "")
        // Users('…')/messages('…')
        if let open = last.firstIndex(of: "("), last.hasSuffix(")") {
            last = last[last.index(after: open)..<last.index(before: last.endIndex)]
            if last.hasPrefix("'") && last.hasSuffix("'") && last.count >= 2 { last = last.dropFirst().dropLast() }
        }
        return last.isEmpty ? nil : String(last)
    }

    /// Printable ASCII without spaces, 1...limit bytes.
    private static func isToken(_ text: String, limit: Int) -> Bool {
        !text.isEmpty && text.utf8.count <= limit && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}

/// A rich notification's `encryptedContent`, exactly as Graph sent it. ENS checks only
/// that each member is the kind of text Graph documents (base64, an id, a hex
/// thumbprint) within bounds, and forwards it; it has no key to open it.
public struct EncryptedContent: Sendable, Equatable {
    public let data: String
    public let dataKey: String
    public let dataSignature: String
    public let certificateID: String
    public let certificateThumbprint: String

    /// `data` beyond this is more than the few selected properties ENS asks for.
    static let maximumDataBytes = 64 * 1024

    init?(_ value: JSONValue) {
        guard let data = value["data"]?.stringValue, Self.isBase64(data, limit: Self.maximumDataBytes),
              let dataKey = value["dataKey"]?.stringValue, Self.isBase64(dataKey, limit: 1024),
              let signature = value["dataSignature"]?.stringValue, Self.isBase64(signature, limit: 128),
              let certificateID = value["encryptionCertificateId"]?.stringValue, !certificateID.isEmpty, certificateID.utf8.count <= 128,
              certificateID.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
              let thumbprint = value["encryptionCertificateThumbprint"]?.stringValue, thumbprint.utf8.count <= 128,
              thumbprint.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x46) || ($0 >= 0x61 && $0 <= 0x66) }) else {
            return nil
        }
        self.data = data
        self.dataKey = dataKey
        self.dataSignature = signature
        self.certificateID = certificateID
        self.certificateThumbprint = thumbprint
    }

    public init(data: String, dataKey: String, dataSignature: String, certificateID: String, certificateThumbprint: String) {
        self.data = data
        self.dataKey = dataKey
        self.dataSignature = dataSignature
        self.certificateID = certificateID
        self.certificateThumbprint = certificateThumbprint
    }

    private static func isBase64(_ text: String, limit: Int) -> Bool {
        !text.isEmpty && text.utf8.count <= limit && text.utf8.allSatisfy { byte in
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == 0x2B || byte == 0x2F || byte == 0x3D
        }
    }
}
