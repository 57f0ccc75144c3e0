

/// Logging.
public struct LoggingSettings: SettingsComponent {
    public var level = "info"

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, LoggingSettings> & Sendable = \.logging

    public static let section = ConfigSection("Logging", keys: [
        key("log.level", \.level, .logLevel, reload: .everyProcess,
            doc: "Lowest level logged: trace, debug, info, notice, warning, error or critical.",
            details: """
            Every ENS process logs one logfmt line per event to stderr (under systemd:
            the journal). No level ever logs an email address, password, token, key or
            sealed value.
            """),
    ])
}
