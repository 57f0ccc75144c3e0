public import XML

/// One `Notification` of a SendNotification callback.
public struct EWSNotification: Sendable, Equatable {
    public let subscriptionID: String
    public let previousWatermark: String?
    public let moreEvents: Bool
    /// Items that arrived (NewMailEvent, and CreatedEvent items in case a server sends
    /// those), in order, without duplicates.
    public let newItemIDs: [String]
    /// Whether the batch holds a StatusEvent (a heartbeat).
    public let heartbeat: Bool
    /// The watermark of the last event: the bookmark to keep.
    public let lastWatermark: String?
}

/// A parsed SendNotification message (docs/exchange.md, "Callbacks").
public struct SendNotification: Sendable, Equatable {
    public let notifications: [EWSNotification]
    /// A response message with ResponseClass="Error" (e.g. ErrorReadEventsFailed: the
    /// subscription is gone on the server side), and the subscription it names.
    public struct Failure: Sendable, Equatable {
        public let code: String
        public let subscriptionID: String?
    }

    public let failures: [Failure]
    public var errorCodes: [String] { failures.map(\.code) }

    public enum Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        case xml(XMLTreeError)
        case notSendNotification(String)

        public var description: String {
            switch self {
            case .xml(let error): error.description
            case .notSendNotification(let reason): "not a SendNotification message: \(reason)"
            }
        }
    }

    /// Parses by namespace URI, never by prefix (Exchange uses `soap11`, WorkMail a
    /// default namespace); the RequestServerVersion header is ignored, whatever it is.
    public init(xml bytes: [UInt8], limits: XMLTree.Limits = XMLTree.Limits()) throws(Invalid) {
        let envelope: XMLTreeElement
        do {
            envelope = try XMLTree.parse(bytes, limits: limits)
        } catch {
            throw .xml(error)
        }
        guard let body = SOAP.body(of: envelope) else { throw .notSendNotification("no SOAP 1.1 envelope and body") }
        guard let messages = body.path(Namespace.messages, "SendNotification", "ResponseMessages") else {
            throw .notSendNotification("no m:SendNotification/m:ResponseMessages")
        }
        var notifications: [EWSNotification] = []
        var errors: [Failure] = []
        let t = Namespace.types
        for message in messages.children(Namespace.messages, "SendNotificationResponseMessage") {
            if message.attributes["ResponseClass"] == "Error" {
                let subscriptionID = message.child(Namespace.messages, "Notification")?.child(t, "SubscriptionId")?.trimmedText
                errors.append(Failure(code: message.child(Namespace.messages, "ResponseCode")?.trimmedText ?? "unknown",
                                      subscriptionID: subscriptionID?.isEmpty == false ? subscriptionID : nil))
                continue
            }
            guard let notification = message.child(Namespace.messages, "Notification") else { continue }
            guard let subscriptionID = notification.child(t, "SubscriptionId")?.trimmedText, !subscriptionID.isEmpty else {
                throw .notSendNotification("a Notification without SubscriptionId")
            }
            var items: [String] = []
            var heartbeat = false
            var watermark: String?
            for event in notification.children where event.namespace == t {
                switch event.name {
                case "StatusEvent":
                    heartbeat = true
                case "NewMailEvent", "CreatedEvent":
                    if let id = event.child(t, "ItemId")?.attributes["Id"], !id.isEmpty, !items.contains(id) { items.append(id) }
                default:
                    break  // other events, and SubscriptionId etc., which have no Watermark child
                }
                if let mark = event.child(t, "Watermark")?.trimmedText, !mark.isEmpty { watermark = mark }
            }
            notifications.append(EWSNotification(
                subscriptionID: subscriptionID,
                previousWatermark: notification.child(t, "PreviousWatermark")?.trimmedText,
                moreEvents: notification.child(t, "MoreEvents")?.trimmedText.lowercased() == "true",
                newItemIDs: items, heartbeat: heartbeat, lastWatermark: watermark
            ))
        }
        guard !notifications.isEmpty || !errors.isEmpty else { throw .notSendNotification("no response messages") }
        self.notifications = notifications
        self.failures = errors
    }
}
