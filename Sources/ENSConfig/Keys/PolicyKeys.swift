extension ConfigSection {
    static let policy = ConfigSection("SEG policy service (secure email gateway)", keys: [
        ConfigKey("policy.url", \.policyURL, .emptyOr(.httpURL), default: "",
                  doc: "Asked for every device registered with an ewsDeviceId before it gets a push: POST <url> {\"deviceId\": \"...\"} -> 200 {\"allowed\": true|false}.",
                  details: """
                  Empty: no policy service; every device may receive notifications.
                  """),
        ConfigKey("policy.ca_file", \.policyCAFile, .optional(.path), default: "",
                  doc: "PEM CA bundle for an https policy service; empty uses the system store."),
        ConfigKey("policy.timeout_ms", \.policyTimeout, .duration(100...30000, .milliseconds), default: "2000",
                  doc: "How long to wait for the policy service, in milliseconds."),
        ConfigKey("policy.on_error", \.policyAllowOnError, .oneOf([("allow", true), ("deny", false)]), default: "deny",
                  doc: "What an unreachable or malformed policy service means: deny (no push) or allow."),
    ])
}
