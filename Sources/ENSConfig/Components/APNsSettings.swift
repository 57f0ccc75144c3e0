internal import POSIX



/// Apple Push Notification service: hosts and credentials.
public struct APNsSettings: SettingsComponent {
    public var productionURL = "https://api.push.apple.com"
    public var sandboxURL = "https://api.sandbox.push.apple.com"
    /// The token-auth signing key (.p8) and its identifiers from the developer account.
    public var keyFile = "/etc/ens/secrets/apns-auth-key.p8"
    public var keyID = ""
    public var teamID = ""
    /// Certificate authentication per bundle id (apns-topic): a PKCS#12 (.p12/.pfx,
    /// with an optional password file) or a PEM file with certificate and key. Topics
    /// without a certificate use token authentication.
    public var certificates: [String: APNsCertificateFiles] = [:]

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, APNsSettings> & Sendable = \.apns

    public static let section = ConfigSection("Apple Push Notification service", keys: [
        key("apns.production_url", \.productionURL, .httpsURL,
            doc: "The APNs production host (override only for tests; the simulator listens on localhost)."),
        key("apns.sandbox_url", \.sandboxURL, .httpsURL,
            doc: "The APNs sandbox (development) host (override only for tests)."),
        key("apns.key_file", \.keyFile, .path,
            doc: "Token authentication: the .p8 signing key from the Apple developer account, its 10-character Key ID and your 10-character Team ID.",
            details: """
            One token serves every bundle id of the team; it is minted once and
            renewed about every 50 minutes.
            """),
        key("apns.key_id", \.keyID, .appleIdentifier, hasDefault: false, example: .commented("ABCDE12345"),
            doc: "The 10-character Key ID of apns.key_file, from the Apple developer account."),
        key("apns.team_id", \.teamID, .appleIdentifier, hasDefault: false, example: .commented("TEAMID1234"),
            doc: "Your 10-character Team ID, from the Apple developer account."),
    ], patterns: [
        pattern("apns.certificate.", .bundleID, .path,
                doc: "Certificate authentication for one bundle id (apns-topic): a PKCS#12 file (.p12/.pfx), or a PEM file holding the certificate " +
                     "and its unencrypted key.",
                details: """
                A bundle id with a certificate uses it (on its own connections); others
                use the token. ens-sender needs the token, at least one certificate, or
                both.
                """,
                examples: ["apns.certificate.com.example.mail = /etc/ens/secrets/apns-com.example.mail.p12"]) { settings, bundleID, path in
            settings.certificates[bundleID, default: APNsCertificateFiles(path: "", passwordFile: nil)].path = path
        },
        pattern("apns.certificate_password_file.", .bundleID, .optional(.path),
                doc: "The file holding the password of a bundle id's PKCS#12 certificate (none: no password).",
                examples: ["apns.certificate_password_file.com.example.mail = " +
                           "/etc/ens/secrets/apns-com.example.mail.password"]) { settings, bundleID, file in
            settings.certificates[bundleID, default: APNsCertificateFiles(path: "", passwordFile: nil)].passwordFile = file
        },
    ])
}

extension APNsSettings {
    /// The token-auth signing key (apns.key_file), or nil when token auth is not
    /// configured (no apns.key_id and apns.team_id): then every topic needs a certificate.
    public func signingKeyPEM() throws(ConfigError) -> String? {
        if keyID.isEmpty && teamID.isEmpty {
            guard !certificates.isEmpty else {
                throw ConfigError(key: "apns.key_id",
                    problem: "must be set (with apns.team_id and apns.key_file), or configure apns.certificate.<bundle id>, to run ens-sender")
            }
            return nil
        }
        guard !keyID.isEmpty else { throw ConfigError(key: "apns.key_id", problem: "must be set with apns.team_id") }
        guard !teamID.isEmpty else { throw ConfigError(key: "apns.team_id", problem: "must be set with apns.key_id") }
        return try ENSConfiguration.secretText(key: "apns.key_file", path: keyFile)
    }

    /// The bytes of a bundle's certificate file and its password ("" without a file).
    public func certificate(bundleID: String) throws(ConfigError) -> (bytes: [UInt8], password: String, isPKCS12: Bool) {
        guard let files = certificates[bundleID], !files.path.isEmpty else {
            throw ConfigError(key: "apns.certificate.\(bundleID)", problem: "a password file is configured but no certificate")
        }
        let bytes: [UInt8]
        do {
            bytes = try Files.read(files.path, limit: 1 << 20)
        } catch {
            throw ConfigError(key: "apns.certificate.\(bundleID)", problem: "names \(files.path), which cannot be read: \(error)")
        }
        let password = try files.passwordFile.map { path throws(ConfigError) in
            try ENSConfiguration.secretText(key: "apns.certificate_password_file.\(bundleID)", path: path)
        } ?? ""
        let lower = files.path.lowercased()
        return (bytes, password, lower.hasSuffix(".p12") || lower.hasSuffix(".pfx"))
    }
}
