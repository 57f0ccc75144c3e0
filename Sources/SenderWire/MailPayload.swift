internal import Codecs
public import OpenSSL
public import ENSModel
public import ENSVault

/// The APNs payload of a new-mail notification, in the device's privacy mode
/// (docs/api.md, "What a device receives"; docs/privacy.md). In `preview`, the original
/// contract's payload:
///
///     {"aps": {"alert": {"title": sender, "body": subject}, "badge": n, "sound": s,
///              "content-available": 1},
///      "ens": {"userid": hex, "id": notification id, "ts": ms since the epoch},
///      "backgroundSyncKey": key, "syncKeyExpirationTime": date}
///
/// In the other modes the visible alert is generic ("New mail"), nothing personal
/// travels in clear, the device is named by `ens.tag` (an opaque per-device id) instead
/// of `ens.userid` (the address's hash, which names the mailbox to anyone who can guess
/// the address), and `ens.privacy` names the mode: `generic` keeps the badge;
/// `encrypted` adds `mutable-content` and `ens.enc`, the content (`content`) sealed to
/// the device's key; `secure` carries the id alone, the app fetches the content.
///
/// `badge` only for devices that asked for badges (and when the unread count is known),
/// `sound` only when the device registered a default sound, the sync-key pair only
/// while unexpired. The result never exceeds APNs' 4096 bytes: the subject (then, if
/// ever needed, the sender) is cut on a character boundary and ends with "…".
public struct MailPayload: Sendable {
    public var sender: String
    public var subject: String
    public var userID: String
    /// The opaque per-device id (`Vault.pushTag`) the private modes carry instead of
    /// `userID`.
    public var deviceTag: String
    public var badge: Int?
    public var sound: String?
    public var syncKey: (key: String, expiresAt: Timestamp)?
    /// The notification's id (also its collapse id) and the server's time when it was
    /// made: a check-in may echo the time back (`lastNotificationTs`), which no device
    /// clock skews.
    public var notificationID: String
    public var createdAt: Timestamp
    /// "N new messages" rather than one message: its text is no one's content, so a
    /// `generic` alert may show it.
    public var isSummary: Bool

    public init(sender: String, subject: String, userID: String, deviceTag: String = "", badge: Int? = nil, sound: String? = nil,
                syncKey: (key: String, expiresAt: Timestamp)? = nil, notificationID: String = "", createdAt: Timestamp = .now(),
                isSummary: Bool = false) {
        self.sender = sender
        self.subject = subject
        self.userID = userID
        self.deviceTag = deviceTag
        self.badge = badge
        self.sound = sound
        self.syncKey = syncKey
        self.notificationID = notificationID
        self.createdAt = createdAt
        self.isSummary = isSummary
    }

    public static let maximumBytes = PushNotification.maximumPayload
    /// The visible title of every alert that does not show the preview.
    public static let genericTitle = "New mail"

    /// The original contract's payload (with id and time).
    public var encoded: [UInt8] {
        fitted { sender, subject in render(sender: sender, subject: subject, generic: nil, enc: nil) }
    }

    /// The payload in a mode that needs no key. `encrypted` needs the device's key
    /// (`encrypted(to:)`); asked for here, it is rendered `secure`, the stricter form.
    public func encoded(_ mode: PrivacyMode) -> [UInt8] {
        switch mode {
        case .preview: encoded
        case .generic: render(sender: "", subject: "", generic: .generic, enc: nil)
        case .encrypted, .secure, .blind: render(sender: "", subject: "", generic: .secure, enc: nil)
        }
    }

    /// The `blind` payload: a generic alert with `mutable-content`, and in `ens.blind`
    /// Graph's encrypted content as ENS received it (`content`, a JSON object ENS cannot
    /// open). Without `content` (it would not fit APNs' 4 KB), `ens.privacy` says
    /// `blind` and the app fetches the object with /getnotification.
    public func blind(_ content: [UInt8]?) -> [UInt8] {
        render(sender: "", subject: "", generic: .blind, enc: nil, blind: content)
    }

    /// Whether a `blind` payload carrying `content` fits a push.
    public func fitsBlind(_ content: [UInt8]) -> Bool {
        blind(content).count <= Self.maximumBytes
    }

    /// The `encrypted` payload: `content` sealed to the device's key in `ens.enc`.
    public func encrypted(to key: P256PublicKey) throws(PreviewEncryptionError) -> [UInt8] {
        // Everything but `ens.enc` is fixed, so the room left for the sealed content is
        // known before sealing: base64 of version, key, nonce and tag around it.
        let frame = render(sender: "", subject: "", generic: .encrypted, enc: "").count
        let room = (Self.maximumBytes - frame) / 4 * 3 - PreviewEncryption.minimumBlobSize
        let content = Self.fit(sender: sender, subject: subject, within: room) { sender, subject in self.content(sender: sender, subject: subject) }
        let sealed = try PreviewEncryption.seal(content, to: key, notificationID: notificationID)
        return render(sender: "", subject: "", generic: .encrypted, enc: Base64.encode(sealed))
    }

    /// The most a history entry holds: what `NotificationLog.summary_sealed` keeps once
    /// the entry is sealed (AES-GCM's nonce and tag around it).
    public static let maximumSummaryBytes = PushNotification.LogRow.maximumSummary - AESGCMKey.nonceSize - AESGCMKey.tagSize

    /// The history's entry: {"sender", "subject"}, the subject cut to fit
    /// `maximumSummaryBytes`. Uncut, a mail whose subject ran to a few kilobytes made a
    /// row the column refused, and its callback failed at every redelivery.
    public var summary: [UInt8] {
        Self.fit(sender: sender, subject: subject, within: Self.maximumSummaryBytes) { sender, subject in
            var summary = JSONObjectWriter()
            summary.add("sender", sender)
            summary.add("subject", subject)
            return summary.finished()
        }
    }

    /// What `encrypted` seals and `secure` keeps for the app to fetch, as a JSON object:
    /// `sender`, `subject`, and while known `badge` and the sync-key pair.
    public var content: [UInt8] {
        Self.fit(sender: sender, subject: subject, within: Self.maximumBytes) { sender, subject in content(sender: sender, subject: subject) }
    }

    private func content(sender: String, subject: String) -> [UInt8] {
        var content = JSONObjectWriter()
        content.add("sender", sender)
        content.add("subject", subject)
        if let badge { content.add("badge", badge) }
        if let syncKey {
            content.add("backgroundSyncKey", syncKey.key)
            content.add("syncKeyExpirationTime", syncKey.expiresAt.apiString)
        }
        return content.finished()
    }

    private func fitted(_ render: (String, String) -> [UInt8]) -> [UInt8] {
        Self.fit(sender: sender, subject: subject, within: Self.maximumBytes, render)
    }

    /// Renders with the subject (then, if ever needed, the sender) cut until the result
    /// fits `limit` bytes. Each pass removes at least the overflow from the text being
    /// cut, so this ends in a few rounds; JSON escaping only makes removed characters
    /// count for more.
    private static func fit(sender: String, subject: String, within limit: Int, _ render: (String, String) -> [UInt8]) -> [UInt8] {
        var sender = String(sender.prefix(256))
        var subject = subject
        var bytes = render(sender, subject)
        while bytes.count > limit {
            let overflow = bytes.count - limit + 3  // room for the ellipsis
            if !subject.isEmpty {
                subject = cut(subject, removingAtLeast: overflow)
            } else if !sender.isEmpty {
                sender = cut(sender, removingAtLeast: overflow)
            } else {
                break  // only a huge sync key or sound could do this; the sender refuses it
            }
            bytes = render(sender, subject)
        }
        return bytes
    }

    /// Drops whole characters from the end until their JSON-escaped form (as
    /// JSONObjectWriter writes it) accounts for at least `bytes`, then marks the cut.
    private static func cut(_ text: String, removingAtLeast bytes: Int) -> String {
        var kept = text.hasSuffix("…") ? String(text.dropLast()) : text
        var removed = 0
        var escaped: [UInt8] = []
        while removed < bytes, let last = kept.last {
            escaped.removeAll(keepingCapacity: true)
            JSONObjectWriter.appendString(String(last), to: &escaped)
            removed += escaped.count - 2  // without the quotes
            kept.removeLast()
        }
        return kept.isEmpty ? "" : kept + "…"
    }

    /// One payload. `generic` nil renders the preview; otherwise the alert is generic
    /// and nothing of the mail is in clear but, in `generic` mode, the badge.
    private func render(sender: String, subject: String, generic: PrivacyMode?, enc: String?, blind: [UInt8]? = nil) -> [UInt8] {
        var alert = JSONObjectWriter()
        if let generic {
            alert.add("title", Self.genericTitle)
            alert.add("body", generic == .generic && isSummary ? self.subject : "")
        } else {
            alert.add("title", sender)
            alert.add("body", subject)
        }
        var aps = JSONObjectWriter()
        aps.add("alert", rawJSON: alert.finished())
        if let badge, generic == nil || generic == .generic { aps.add("badge", badge) }
        if let sound { aps.add("sound", sound) }
        aps.add("content-available", 1)
        // The notification service extension runs only for alerts that say so.
        if generic == .encrypted || generic == .secure || generic == .blind { aps.add("mutable-content", 1) }
        var ens = JSONObjectWriter()
        if generic == nil { ens.add("userid", userID) } else { ens.add("tag", deviceTag) }
        if !notificationID.isEmpty { ens.add("id", notificationID) }
        ens.add("ts", Int(createdAt.millisecondsSinceEpoch))
        if let generic { ens.add("privacy", generic.name) }
        if let enc { ens.add("enc", enc) }
        if let blind { ens.add("blind", rawJSON: blind) }
        var payload = JSONObjectWriter()
        payload.add("aps", rawJSON: aps.finished())
        payload.add("ens", rawJSON: ens.finished())
        if generic == nil, let syncKey {
            payload.add("backgroundSyncKey", syncKey.key)
            payload.add("syncKeyExpirationTime", syncKey.expiresAt.apiString)
        }
        return payload.finished()
    }
}
