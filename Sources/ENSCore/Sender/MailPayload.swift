/// The APNs payload of a new-mail notification, exactly as the API contract's last
/// section describes it:
///
///     {"aps": {"alert": {"title": sender, "body": subject}, "badge": n, "sound": s,
///              "content-available": 1},
///      "ens": {"userid": hex},
///      "backgroundSyncKey": key, "syncKeyExpirationTime": date}
///
/// `badge` only for devices that asked for badges (and when the unread count is known),
/// `sound` only when the device registered a default sound, the sync-key pair only
/// while unexpired. The result never exceeds APNs' 4096 bytes: the subject (then, if
/// ever needed, the sender) is cut on a character boundary and ends with "…".
public struct MailPayload: Sendable {
    public var sender: String
    public var subject: String
    public var userID: String
    public var badge: Int?
    public var sound: String?
    public var syncKey: (key: String, expiresAt: Timestamp)?

    public init(sender: String, subject: String, userID: String, badge: Int? = nil, sound: String? = nil,
                syncKey: (key: String, expiresAt: Timestamp)? = nil) {
        self.sender = sender
        self.subject = subject
        self.userID = userID
        self.badge = badge
        self.sound = sound
        self.syncKey = syncKey
    }

    public static let maximumBytes = PushNotification.maximumPayload

    public var encoded: [UInt8] {
        var sender = String(self.sender.prefix(256))
        var subject = self.subject
        var bytes = render(sender: sender, subject: subject)
        // Each pass removes at least the overflow from the text being cut, so this ends
        // in a few rounds; JSON escaping only makes removed characters count for more.
        while bytes.count > Self.maximumBytes {
            let overflow = bytes.count - Self.maximumBytes + 3  // room for the ellipsis
            if !subject.isEmpty {
                subject = Self.cut(subject, removingAtLeast: overflow)
            } else if !sender.isEmpty {
                sender = Self.cut(sender, removingAtLeast: overflow)
            } else {
                break  // only a huge sync key or sound could do this; the sender refuses it
            }
            bytes = render(sender: sender, subject: subject)
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

    private func render(sender: String, subject: String) -> [UInt8] {
        var alert = JSONObjectWriter()
        alert.add("title", sender)
        alert.add("body", subject)
        var aps = JSONObjectWriter()
        aps.add("alert", rawJSON: alert.finished())
        if let badge { aps.add("badge", badge) }
        if let sound { aps.add("sound", sound) }
        aps.add("content-available", 1)
        var ens = JSONObjectWriter()
        ens.add("userid", userID)
        var payload = JSONObjectWriter()
        payload.add("aps", rawJSON: aps.finished())
        payload.add("ens", rawJSON: ens.finished())
        if let syncKey {
            payload.add("backgroundSyncKey", syncKey.key)
            payload.add("syncKeyExpirationTime", syncKey.expiresAt.apiString)
        }
        return payload.finished()
    }
}
