

/// Firebase Cloud Messaging HTTP v1: its host and a service account per Android package.
public struct FCMSettings: SettingsComponent {
    /// FCM HTTP v1: its base URL, and a service-account key file (Google's JSON) per
    /// Android package name (`fcm.service_account.<package>`). No account: no FCM.
    public var url = "https://fcm.googleapis.com"
    public var serviceAccountFiles: [String: String] = [:]

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, FCMSettings> & Sendable = \.fcm

    public static let section = ConfigSection("Firebase Cloud Messaging (Android)", keys: [
        key("fcm.url", \.url, .httpsURL,
            doc: "FCM's base URL (override only for tests)."),
    ], patterns: [
        pattern("fcm.service_account.", .bundleID, .path,
                doc: "Firebase Cloud Messaging (HTTP v1) for one Android package name (the `bundleid` an Android client registers with): a " +
                     "service-account key file, the JSON Google's console issues (mode 0600, owner ens).",
                details: """
                ens-sender signs an OAuth assertion with the account's key, exchanges it at
                the file's token_uri for an access token, and reuses that token until five
                minutes before it expires. No account: Android devices can register, but
                nothing is delivered to them.
                """,
                examples: ["fcm.service_account.com.example.mail = /etc/ens/secrets/fcm-com.example.mail.json"]) { settings, package, path in
            settings.serviceAccountFiles[package] = path
        },
    ])
}
