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
        case lifecycle(subscriptionID: String, clientState: String?, event: LifecycleEvent)
    }

    public let items: [Item]
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
