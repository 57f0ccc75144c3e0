extension ConfigSection {
    static let sealed = ConfigSection("Sealed values", keys: [
        ConfigKey("sealed.max_age_seconds", \.sealedMaximumAge, .duration(30...86400, .seconds), default: "900", reload: .responders,
                  doc: "Sealed values (docs/api.md, \"Sealed values\"): a sealed object names its use (\"purpose\", e.g. \"updateprivacy.info\") and when it was sealed (\"sealedAt\", ms since the epoch), and is refused at any other endpoint or field and once its time is more than this many seconds from the server's, either way.",
                  details: """
                  Set require_purpose to true once every app sends them: the original
                  contract's forms (no purpose, no time) are then refused as well. Both
                  change with a reload.
                  """),
        ConfigKey("sealed.require_purpose", \.sealedRequirePurpose, .boolean, default: "false", reload: .responders,
                  doc: "Refuse the original contract's unbound sealed forms too (no purpose, no sealedAt)."),
    ])
}
