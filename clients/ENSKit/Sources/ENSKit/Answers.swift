public import Foundation

/// `/getpublickey`'s answer.
public struct ENSPublicKey: Sendable, Equatable {
    public let userID: String
    /// The user's RSA public key (PEM); ENSKit pins it and seals under it.
    public let publicKeyPEM: String
    /// `UserAlreadySubscribed`: the record holds a live subscription.
    public let isSubscribed: Bool
}

/// A successful `/registerdevicev2`.
public struct ENSRegistrationResult: Sendable, Equatable {
    public enum Outcome: String, Sendable {
        /// `UserSubscribed`: ENS subscribed to the mailbox.
        case subscribed = "UserSubscribed"
        /// `UserUpdated`: the device joined (or changed) a live subscription.
        case updated = "UserUpdated"
        /// `UserAlreadySubscribed`: nothing changed.
        case alreadySubscribed = "UserAlreadySubscribed"
    }

    public let outcome: Outcome
    /// The device's opaque id in private-mode pushes (`ens.tag`); ENSKit remembers
    /// which user it belongs to.
    public let pushTag: String?
    /// The mode the device's pushes will use (the operator's floor may raise the one
    /// asked for); present when the registration asked for one.
    public let privacy: ENSPrivacyMode?
}

/// A check-in's answer, as what the app must do next.
public struct ENSCheckInResult: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        /// The subscription is healthy.
        case nothing
        /// Call ``ENSClient/register(_:)`` again, with credentials.
        case registerAgain(Reason)
        /// The subscription is healthy, but the push token the OS now gives differs
        /// from the registered one: call ``ENSClient/updateDevice(user:from:to:)``.
        case updateToken(registered: ENSPushToken)
    }

    public enum Reason: Sendable, Equatable {
        /// `UserRecordPresentNotSubscribed`: the subscription is missing or unhealthy,
        /// the push service rejected the token, a notification went missing, or the
        /// OAuth refresh failed.
        case notSubscribed
        /// `UserSubscriptionNotFound`: ENS has no record of the user or this device.
        case notFound
        /// The check-in carried credentials the subscription cannot keep
        /// (`"credentials": "Unused"`): register with them instead.
        case credentialsUnused
    }

    /// What became of a check-in's `creds`.
    public enum Credentials: String, Sendable {
        /// Sealed to the subscription; its next callback makes them current.
        case stored = "Stored"
        /// The subscription keeps no credentials (Graph, old or not live).
        case unused = "Unused"
    }

    public let action: Action
    /// Present when the check-in carried credentials and ENS answered about them.
    public let credentials: Credentials?
}

/// The background sync key a notification carries until it expires.
public struct ENSSyncKey: Sendable, Equatable, CustomStringConvertible {
    public let key: String
    /// As ENS writes it (`MM/dd/yyyy HH:mm:ss.SSS`, UTC).
    public let expirationText: String
    public var expiration: Date? { ENSDate.date(expirationText) }

    public init(key: String, expirationText: String) {
        self.key = key
        self.expirationText = expirationText
    }

    public var description: String { "ENSSyncKey(…, expires \(expirationText))" }
}

/// A notification's content: what a `preview` push shows, an `encrypted` push seals and
/// `/getnotification` returns for a `secure` one.
public struct ENSNotificationContent: Sendable, Equatable {
    public let sender: String
    public let subject: String
    public let badge: Int?
    public let syncKey: ENSSyncKey?

    public init(sender: String, subject: String, badge: Int? = nil, syncKey: ENSSyncKey? = nil) {
        self.sender = sender
        self.subject = subject
        self.badge = badge
        self.syncKey = syncKey
    }
}

/// One entry of `/getnotificationhistory`.
public struct ENSHistoryEntry: Sendable, Equatable {
    /// The notification id (`ens.id`).
    public let id: String
    /// The server's time when it was made (`ens.ts`), milliseconds since the epoch.
    public let timestamp: Int64
    public let sender: String
    public let subject: String
    public let isRead: Bool

    public var time: Date { Date(timeIntervalSince1970: Double(timestamp) / 1000) }
}
