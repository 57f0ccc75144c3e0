extension ConfigSection {
    static let fcm = ConfigSection("Firebase Cloud Messaging (Android)", keys: [
        ConfigKey("fcm.url", \.fcmURL, .httpsURL, default: "https://fcm.googleapis.com",
                  doc: "FCM's base URL (override only for tests)."),
    ], patterns: [
        ConfigPattern("fcm.service_account.", .bundleID, .path,
                      doc: "Firebase Cloud Messaging (HTTP v1) for one Android package name (the `bundleid` an Android client registers with): a service-account key file, the JSON Google's console issues (mode 0600, owner ens).",
                      details: """
                      ens-apns signs an OAuth assertion with the account's key, exchanges it at
                      the file's token_uri for an access token, and reuses that token until five
                      minutes before it expires. No account: Android devices can register, but
                      nothing is delivered to them.
                      """,
                      examples: ["fcm.service_account.com.example.mail = /etc/ens/secrets/fcm-com.example.mail.json"]) { config, package, path in
            config.fcmServiceAccountFiles[package] = path
        },
    ])
}
