/// A way of watching a mailbox for new mail: the `mail_backend` column of a record.
/// Each backend brings three parts (docs/architecture.md, "Adding a mail backend"):
/// a registrar (`MailboxRegistering`, in ENSResponder), a callback source
/// (`MailNotificationSource`) and a keeper of its subscriptions for the cron job
/// (`SubscriptionKeeping`).
public enum MailBackend: String, Sendable, CaseIterable {
    /// Exchange Web Services push subscriptions (on-premises Exchange, and Exchange
    /// Online tenants that still allow EWS).
    case ews
    /// Microsoft Graph change notifications (Exchange Online), with ENS's own
    /// application identity per tenant: no user credential is kept.
    case graph
    /// Dovecot's push_notification plugin (IMAP hosting): the hosting admin's Dovecot
    /// tells ENS of each delivery to an account that opted in through IMAP METADATA; no
    /// user credential is kept (docs/dovecot.md).
    case dovecot
}

/// What one callback from a backend says, in words every backend shares.
public struct MailEvents: Sendable, Equatable {
    /// A subscription the backend reports as failed, and the backend's own code for it.
    public struct Failure: Sendable, Equatable {
        public let subscriptionID: String?
        public let code: String

        public init(subscriptionID: String?, code: String) {
            self.subscriptionID = subscriptionID
            self.code = code
        }
    }

    /// Every subscription the callback speaks for.
    public var subscriptionIDs: [String]
    /// Messages that arrived in the watched folder, in the backend's order.
    public var newItemIDs: [String]
    public var failures: [Failure]
    /// Whether the callback is (also) a sign of life with nothing new.
    public var heartbeat: Bool
    /// Where the backend would resume from, if it says (EWS: the newest watermark).
    public var watermark: String?

    public init(subscriptionIDs: [String], newItemIDs: [String], failures: [Failure] = [], heartbeat: Bool = false, watermark: String? = nil) {
        self.subscriptionIDs = subscriptionIDs
        self.newItemIDs = newItemIDs
        self.failures = failures
        self.heartbeat = heartbeat
        self.watermark = watermark
    }
}

/// What a device is told about one new message.
public struct MailSummary: Sendable, Equatable {
    public let itemID: String
    public let subject: String
    public let senderName: String

    public init(itemID: String, subject: String, senderName: String) {
        self.itemID = itemID
        self.subject = subject
        self.senderName = senderName
    }
}
