public import ENSModel
internal import POSIX



/// Private notifications (docs/privacy.md): the operator's floor, how long secure
/// content waits, the history.
public struct PrivacySettings: SettingsComponent {
    /// The least private mode any device's pushes use: a device that chose less is
    /// raised to it (`encrypted` without a key: `secure`).
    public var minimumMode: PrivacyMode = .preview
    /// How long a `secure` notification's content waits, sealed, for its one fetch.
    public var fetchTTL: Duration = .seconds(86400)
    /// Notifications per device the history keeps (0: no history is kept), and for how long.
    public var historyCount = 20
    public var historyRetention: Duration = .hours(72)

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, PrivacySettings> & Sendable = \.privacy

    public static let section = ConfigSection("Private notifications (docs/privacy.md)", keys: [
        key("privacy.minimum_mode", \.minimumMode, .privacyMode, reload: .responders,
            doc: "The least private mode any device's pushes use: preview (sender and subject in the push, the original contract), generic (\"New " +
                 "mail\" and the badge), encrypted (the preview sealed to the device's P-256 key; devices without one get secure) or secure (the " +
                 "notification id alone; the app fetches the content).",
            details: """
            Devices that chose less are raised to it. Changes with `systemctl reload
            ens-fcgi`.
            """),
        key("privacy.fetch_ttl_seconds", \.fetchTTL, .duration(60...2_592_000, .seconds),
            doc: "How long a secure notification's content waits, sealed, for its one fetch."),
        key("history.count", \.historyCount, .integer(0...500), reload: .responders,
            doc: "The notification history per device (/getnotificationhistory): how many entries (0: none is kept) and for how long.",
            details: """
            Sender and subject are kept sealed at rest and go with the device.
            history.count changes with a reload.
            """),
        key("history.retention_hours", \.historyRetention, .duration(1...8760, .hours),
            doc: "How long, in hours, the notification history keeps an entry."),
    ])
}
