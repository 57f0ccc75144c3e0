internal import ENSModel
internal import POSIX

/// Every setting ENS reads: one value of each component's settings (its keys are
/// declared beside its properties, Sources/ENSConfig/Components). The defaults are those
/// of a Debian host installed per docs/deployment.md; `make run` writes a config that
/// points into `var/`.
public struct ENSConfiguration: Sendable {
    public var pool = ResponderPoolSettings()
    public var deviceAPI = DeviceAPISettings()
    public var limits = RequestLimitSettings()
    public var database = DatabaseSettings()
    public var secrets = SecretSettings()
    public var push = PushSettings()
    public var apns = APNsSettings()
    public var fcm = FCMSettings()
    public var maintenance = MaintenanceSettings()
    public var exchange = ExchangeSettings()
    public var privacy = PrivacySettings()
    public var graph = GraphSettings()
    public var dovecot = DovecotSettings()
    public var policy = PolicySettings()
    public var metrics = MetricsSettings()
    public var logging = LoggingSettings()

    /// The components, in the order of the example file and the man page.
    public static let components: [any SettingsComponent.Type] = [
        ResponderPoolSettings.self, DeviceAPISettings.self, RequestLimitSettings.self, DatabaseSettings.self, SecretSettings.self,
        PushSettings.self, APNsSettings.self, FCMSettings.self, MaintenanceSettings.self, ExchangeSettings.self, PrivacySettings.self,
        GraphSettings.self, DovecotSettings.self, PolicySettings.self, MetricsSettings.self, LoggingSettings.self,
    ]

    /// The file this configuration was read from, as written (for a reload to compare).
    public private(set) var file = ConfigFile()

    public init() {}

    public static var knownKeys: [String] { ConfigSchema.keys.map(\.name).sorted() }

    /// The deprecated keys this configuration was read with (old name, new name), for
    /// each program to log once it has a logger.
    public private(set) var deprecatedKeysUsed: [(old: String, new: String)] = []

    /// Keys that name an app after their prefix: `apns.certificate.<bundle id>`,
    /// `apns.certificate_password_file.<bundle id>`, `fcm.service_account.<package>`.
    public static let bundleKeyPrefixes = ConfigSchema.patterns.filter { $0.field == nil }.map(\.prefix)

    /// Keys of one Graph tenant: `graph.tenant.<name>.<field>`.
    public static let graphTenantPrefix = "graph.tenant."

    /// Applies a parsed file over the defaults, each key through its declaration
    /// (`ConfigSchema`): a pattern's (`apns.certificate.<bundle id>`, ...), a deprecated
    /// name's, or its own; a key declared nowhere is an error.
    public init(file: ConfigFile) throws(ConfigError) {
        self.init()
        self.file = file
        for key in file.values.keys.sorted() {
            let value = file.values[key]!
            do throws(ConfigError) {
                if let family = ConfigSchema.patternFamily(of: key) {
                    try ConfigSchema.apply(family, key: key, value: value, to: &self)
                    continue
                }
                var name = key
                if let alias = ConfigSchema.aliasesByOldName[key] {
                    guard file.values[alias.new] == nil else {
                        throw ConfigError(key: key,
                            problem: "is the old name of \(alias.new), which is set too (line \(file.lines[alias.new] ?? 0)); keep only \(alias.new)")
                    }
                    deprecatedKeysUsed.append((key, alias.new))
                    name = alias.new
                }
                guard let declared = ConfigSchema.keysByName[name] else {
                    throw ConfigError(key: key, problem: "is not a known setting")
                }
                try declared.apply(&self, key, value)
            } catch {
                throw ConfigError(key: key, line: file.lines[key], problem: error.problem)
            }
        }
        for component in Self.components {
            try check(component, file)
        }
    }

    private func check<Component: SettingsComponent>(_ component: Component.Type, _ file: ConfigFile) throws(ConfigError) {
        try self[keyPath: Component.configuration].check(file)
    }

    /// This configuration with the keys `scope` reloads taken from `fresh` (a SIGHUP):
    /// each key declared `reload: scope` (and those every process reloads), nothing else.
    public func reloading(_ scope: ConfigKey.Reload, from fresh: ENSConfiguration) -> ENSConfiguration {
        var next = self
        for key in ConfigSchema.keys where key.reload == scope || key.reload == .everyProcess {
            key.copy(&next, fresh)
        }
        return next
    }

    /// Reads the config file at `path`.
    public static func load(path: String) throws(ConfigError) -> ENSConfiguration {
        let bytes: [UInt8]
        do {
            bytes = try Files.read(path, limit: 1 << 20)
        } catch {
            throw ConfigError(key: nil, problem: "cannot read \(path): \(error)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigError(key: nil, problem: "\(path) is not UTF-8 text")
        }
        return try ENSConfiguration(file: ConfigFile(parsing: text))
    }

    /// The config path: `--config`, else `$ENS_CONFIG`, else `/etc/ens/ens.conf`.
    public static func resolvePath(flag: String?) -> String {
        flag ?? Environment.get("ENS_CONFIG") ?? "/etc/ens/ens.conf"
    }

    // MARK: Secrets (read from their own files, never from the config file itself)

    public static func secretText(key: String, path: String) throws(ConfigError) -> String {
        let text = try textFile(key: key, path: path, limit: 4096)
        let trimmed = text.trimmingCharacters(in: " \t\r\n")
        guard !trimmed.isEmpty else { throw ConfigError(key: key, problem: "names \(path), which is empty") }
        return trimmed
    }

    /// The text of a file a key names (a secret, the shard map); errors name the key.
    static func textFile(key: String, path: String, limit: Int) throws(ConfigError) -> String {
        let bytes: [UInt8]
        do {
            bytes = try Files.read(path, limit: limit)
        } catch {
            throw ConfigError(key: key, problem: "names \(path), which cannot be read: \(error)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigError(key: key, problem: "names \(path), which is not UTF-8 text")
        }
        return text
    }
}

/// Where one bundle's APNs certificate lives.
public struct APNsCertificateFiles: Sendable, Equatable {
    public var path: String
    public var passwordFile: String?
}

/// One database server of `db.hosts`.
public struct DatabaseEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, IPv6 in brackets: how the operator wrote it in db.hosts.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
