internal import Codecs
public import OpenSSL



/// Where the master key and the API-token cache are, and the RSA key pool.
public struct SecretSettings: SettingsComponent {
    public var masterKeyFile = "/etc/ens/secrets/master.key"
    public var apiTokenCacheFile = "/var/lib/ens/api-tokens.cache"
    /// How often responders look at the token cache file for changes (a stat call).
    public var apiTokenRefresh: Duration = .seconds(5)
    public var keyPoolSize = 200
    /// Opened private keys each responder process keeps in memory (a few KiB each).
    public var keyCacheSize = 1000

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, SecretSettings> & Sendable = \.secrets

    public static let section = ConfigSection("Secrets, API tokens and the RSA key pool", keys: [
        key("security.master_key_file", \.masterKeyFile, .path,
            doc: "File holding the 32-byte master key as 64 hexadecimal characters (create it with: openssl rand -hex 32).",
            details: """
            It seals the secrets ENS stores in MariaDB (AES-256-GCM). Keep it 0640
            root:ens and back it up apart from database dumps: without it nothing
            sealed can be opened again.
            """),
        key("auth.token_cache_file", \.apiTokenCacheFile, .path,
            doc: "File of API token hashes that the responders check ApiToken headers against.",
            details: """
            `ens-cron api-keys` (every minute, from ens-cron.timer or cron) and
            `ens-cron token create|revoke` rewrite it atomically from the database. It
            holds SHA-256 hashes only. The directory must be writable by the ens user.
            """),
        key("auth.refresh_seconds", \.apiTokenRefresh, .duration(1...3600, .seconds),
            doc: "How often, in seconds, each responder looks at auth.token_cache_file for changes (one stat call).",
            details: """
            A new or revoked token takes effect in the responders at most this long
            after the cache file is rewritten.
            """),
        key("keys.pool_size", \.keyPoolSize, .integer(0...100_000),
            doc: "Number of pre-generated RSA-2048 key pairs `ens-cron keys` keeps in the KeyPool table, so /getpublickey does not generate a key " +
                 "on the request path (generation takes 0.1-0.7 s of CPU).",
            details: """
            When the pool runs dry, responders generate keys themselves and log a
            warning; raise this if that happens between two ens-cron runs.
            """),
        key("keys.cache_size", \.keyCacheSize, .integer(0...100_000),
            doc: "Opened RSA private keys each responder process keeps in memory (0 turns the cache off).",
            details: """
            Opening a key (AES-GCM open plus OpenSSL's DER decoding and set-up) costs
            more than the RSA operation itself; each cached key takes a few KiB, so
            the default of 1000 adds a few MB per process.
            """),
    ])
}

extension SecretSettings {
    /// The 32-byte master key, stored as 64 hex characters.
    public func masterKey() throws(ConfigError) -> AESGCMKey {
        let text = try ENSConfiguration.secretText(key: "security.master_key_file", path: masterKeyFile)
        guard let bytes = Hex.decode(text), bytes.count == AESGCMKey.keySize, let key = try? AESGCMKey(bytes: bytes) else {
            throw ConfigError(key: "security.master_key_file",
                              problem: "must hold 64 hexadecimal characters (32 bytes); generate one with `openssl rand -hex 32`")
        }
        return key
    }
}
