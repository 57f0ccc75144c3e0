extension ConfigSection {
    static let apns = ConfigSection("Apple Push Notification service", keys: [
        ConfigKey("apns.production_url", \.apnsProductionURL, .httpsURL, default: "https://api.push.apple.com",
                  doc: "The APNs production host (override only for tests; the simulator listens on localhost)."),
        ConfigKey("apns.sandbox_url", \.apnsSandboxURL, .httpsURL, default: "https://api.sandbox.push.apple.com",
                  doc: "The APNs sandbox (development) host (override only for tests)."),
        ConfigKey("apns.key_file", \.apnsKeyFile, .path, default: "/etc/ens/secrets/apns-auth-key.p8",
                  doc: "Token authentication: the .p8 signing key from the Apple developer account, its 10-character Key ID and your 10-character Team ID.",
                  details: """
                  One token serves every bundle id of the team; it is minted once and
                  renewed about every 50 minutes.
                  """),
        ConfigKey("apns.key_id", \.apnsKeyID, .appleIdentifier, default: nil, example: .commented("ABCDE12345"),
                  doc: "The 10-character Key ID of apns.key_file, from the Apple developer account."),
        ConfigKey("apns.team_id", \.apnsTeamID, .appleIdentifier, default: nil, example: .commented("TEAMID1234"),
                  doc: "Your 10-character Team ID, from the Apple developer account."),
    ], patterns: [
        ConfigPattern("apns.certificate.", .bundleID, .path,
                      doc: "Certificate authentication for one bundle id (apns-topic): a PKCS#12 file (.p12/.pfx), or a PEM file holding the certificate and its unencrypted key.",
                      details: """
                      A bundle id with a certificate uses it (on its own connections); others
                      use the token. ens-apns needs the token, at least one certificate, or
                      both.
                      """,
                      examples: ["apns.certificate.com.example.mail = /etc/ens/secrets/apns-com.example.mail.p12"]) { config, bundleID, path in
            config.apnsCertificates[bundleID, default: APNsCertificateFiles(path: "", passwordFile: nil)].path = path
        },
        ConfigPattern("apns.certificate_password_file.", .bundleID, .optional(.path),
                      doc: "The file holding the password of a bundle id's PKCS#12 certificate (none: no password).",
                      examples: ["apns.certificate_password_file.com.example.mail = /etc/ens/secrets/apns-com.example.mail.password"]) { config, bundleID, file in
            config.apnsCertificates[bundleID, default: APNsCertificateFiles(path: "", passwordFile: nil)].passwordFile = file
        },
    ])
}
