extension ConfigSection {
    static let logging = ConfigSection("Logging", keys: [
        ConfigKey("log.level", \.logLevel, .logLevel, default: "info", reload: .everyProcess,
                  doc: "Lowest level logged: trace, debug, info, notice, warning, error or critical.",
                  details: """
                  Every ENS process logs one logfmt line per event to stderr (under systemd:
                  the journal). No level ever logs an email address, password, token, key or
                  sealed value.
                  """),
    ])
}
