extension ConfigSection {
    static let privacy = ConfigSection("Private notifications (docs/privacy.md)", keys: [
        ConfigKey("privacy.minimum_mode", \.privacyMinimumMode, .privacyMode, default: "preview", reload: .responders,
                  doc: "The least private mode any device's pushes use: preview (sender and subject in the push, the original contract), generic (\"New mail\" and the badge), encrypted (the preview sealed to the device's P-256 key; devices without one get secure) or secure (the notification id alone; the app fetches the content).",
                  details: """
                  Devices that chose less are raised to it. Changes with `systemctl reload
                  ens-fcgi`.
                  """),
        ConfigKey("privacy.fetch_ttl_seconds", \.privacyFetchTTL, .duration(60...2_592_000, .seconds), default: "86400",
                  doc: "How long a secure notification's content waits, sealed, for its one fetch."),
        ConfigKey("history.count", \.historyCount, .integer(0...500), default: "20", reload: .responders,
                  doc: "The notification history per device (/getnotificationhistory): how many entries (0: none is kept) and for how long.",
                  details: """
                  Sender and subject are kept sealed at rest and go with the device.
                  history.count changes with a reload.
                  """),
        ConfigKey("history.retention_hours", \.historyRetention, .duration(1...8760, .hours), default: "72",
                  doc: "How long, in hours, the notification history keeps an entry."),
    ])
}
