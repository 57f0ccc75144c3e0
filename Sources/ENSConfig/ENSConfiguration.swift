public import ENSModel
internal import Codecs
public import OpenSSL
public import POSIX

/// Every setting ENS reads, with its default. The defaults are those of a Debian host
/// installed per docs/deployment.md; `make run` writes a config that points into `var/`. Each
/// key of the file is declared once, in Config/Keys/ (`ConfigKey`): its declared default
/// must parse to the value given here (ConfigDeclarationTests).
public struct ENSConfiguration: Sendable {
    // FastCGI responder pool
    public var fcgiSocket = "/run/ens/fcgi.sock"
    public var fcgiSocketMode: UInt32 = 0o660
    public var fcgiProcesses = 2
    public var fcgiThreads = 4
    /// Run responder threads under SCHED_BATCH (see `Scheduling.useBatchPolicy`).
    public var fcgiBatchScheduling = true
    public var fcgiBacklog: Int32 = 1024
    public var maxBodyBytes = 65536
    /// How long a responder trusts its last database check when answering /alive.
    public var healthCache: Duration = .milliseconds(1000)

    // Request limits in the responders (nginx's, for fronts that cannot apply them)
    public var limitsMode = RequestLimitsMode.whenAsked
    public var limitsTableFile = "/run/ens/limits.table"
    public var limitsAPIRate = 20
    public var limitsAPIBurst = 100
    public var limitsRecordsPerMinute = 30
    public var limitsRecordsBurst = 30
    public var limitsCallbackRate = 10
    public var limitsCallbackBurst = 100
    public var limitsCallbackHostRate = 1000
    public var limitsCallbackHostBurst = 5000
    public var limitsGraphRate = 20
    public var limitsGraphBurst = 200
    public var limitsGraphHostRate = 2000
    public var limitsGraphHostBurst = 10000

    // Database
    public var dbSocket: String? = "/run/mysqld/mysqld.sock"
    public var dbHost = "localhost"
    public var dbPort = 3306
    /// Several servers (the nodes of a Galera cluster), tried in order; empty: db.host.
    public var dbHosts: [DatabaseEndpoint] = []
    public var dbName = "ens"
    /// The shard map file (`ShardMap`); nil: one database.
    public var dbShardMap: String?
    public var dbUser = "ens_service"
    public var dbPasswordFile = "/etc/ens/secrets/db-service.password"
    public var dbMigrationUser = "ens_migrate"
    public var dbMigrationPasswordFile = "/etc/ens/secrets/db-migrate.password"
    public var dbConnectTimeout: Duration = .seconds(2)
    /// TLS to a database on another host (TCP): required and verified when a CA is set.
    public var dbTLSCAFile: String?
    public var dbTLSCertificateFile: String?
    public var dbTLSKeyFile: String?
    public var migrationsDirectory = "/usr/share/ens/sql/migrations"

    // Secrets and authentication
    public var masterKeyFile = "/etc/ens/secrets/master.key"
    public var apiTokenCacheFile = "/var/lib/ens/api-tokens.cache"
    /// How often responders look at the token cache file for changes (a stat call).
    public var apiTokenRefresh: Duration = .seconds(5)

    /// Time past a subscription's heartbeat interval before it counts as unhealthy
    /// (no heartbeat) and devices are told to register again.
    public var subscriptionGrace: Duration = .seconds(300)
    /// How far a sealed object's `sealedAt` may lie from the server's time (either way)
    /// before it is refused, and whether the original contract's unbound forms (no
    /// `purpose`, no `sealedAt`) are refused too (docs/api.md, "Sealed values").
    public var sealedMaximumAge: Duration = .seconds(900)
    public var sealedRequirePurpose = false

    // RSA key pool
    public var keyPoolSize = 200
    /// Opened private keys each responder process keeps in memory (a few KiB each).
    public var keyCacheSize = 1000

    // Processes around the responders
    public var pushSocket = "/run/ens/apns.sock"
    public var pushSpoolDirectory = "/var/lib/ens/spool"
    public var pushSpoolCapacity = 100_000
    /// This host's name in SenderHosts (push.host_name); nil: the system's (`senderHostName()`).
    public var pushHostName: String?
    public var apnsProductionURL = "https://api.push.apple.com"
    public var apnsSandboxURL = "https://api.sandbox.push.apple.com"
    /// PEM CA bundle for the APNs hosts; empty uses the system store.
    public var pushCAFile: String?
    /// The token-auth signing key (.p8) and its identifiers from the developer account.
    public var apnsKeyFile = "/etc/ens/secrets/apns-auth-key.p8"
    public var apnsKeyID = ""
    public var apnsTeamID = ""
    /// Certificate authentication per bundle id (apns-topic): a PKCS#12 (.p12/.pfx,
    /// with an optional password file) or a PEM file with certificate and key. Topics
    /// without a certificate use token authentication.
    public var apnsCertificates: [String: APNsCertificateFiles] = [:]
    /// FCM HTTP v1: its base URL, and a service-account key file (Google's JSON) per
    /// Android package name (`fcm.service_account.<package>`). No account: no FCM.
    public var fcmURL = "https://fcm.googleapis.com"
    public var fcmServiceAccountFiles: [String: String] = [:]
    public var pushMaximumInFlight = 500
    public var pushConnectionsPerHost = 2
    /// The first wait of an app's notifications after the push service refused its
    /// credential (doubling, up to 15 minutes, while it stays refused).
    public var pushCredentialPause: Duration = .seconds(60)
    public var lockFile = "/run/ens/ens-cron.lock"
    /// How long the cluster-wide cron lease lasts without renewal (a crashed holder's
    /// jobs start elsewhere at most this long after it died).
    public var cronLease: Duration = .seconds(300)
    /// Each cron job's last run, for `ens-cron status` (see `CronJobLog`).
    public var cronStatusFile = "/var/lib/ens/cron-status"

    // Maintenance (ens-cron)
    public var deviceRetention: Duration = .days(30)
    public var disabledRetention: Duration = .days(7)
    public var emptyRecordRetention: Duration = .days(7)
    public var wakeupInterval: Duration = .minutes(360)

    // Exchange (EWS)
    /// The public https URL of the callback location, ending in `/ews/`; registration
    /// needs it (callback URLs are this plus a sealed token).
    public var exchangeCallbackURL = ""
    /// PEM CA bundle for Exchange servers; nil uses the system store.
    public var exchangeCAFile: String?
    /// libcurl CONNECT_TO entries, comma-separated; for test setups only.
    public var exchangeConnectTo: [String] = []
    /// StatusFrequency of new subscriptions (minutes, 1–1440). Exchange retries a
    /// failed callback for about this long, so an ENS outage shorter than roughly half
    /// of it costs no subscription; heartbeats also come this often, so a dead
    /// subscription is noticed after it plus subscription.grace_seconds.
    public var exchangeStatusFrequency: Duration = .minutes(30)
    public var exchangeTimeout: Duration = .milliseconds(10000)
    /// Budget for a callback's GetItem and GetFolder together; past it devices get a
    /// generic alert.
    public var exchangeItemTimeout: Duration = .milliseconds(5000)
    /// One wall-clock budget for a registration's Exchange work: every Autodiscover hop,
    /// the proof and the Subscribe attempts together.
    public var exchangeRegistrationBudget: Duration = .milliseconds(20000)
    /// Networks Exchange traffic may reach although they are special (loopback, private,
    /// link-local, ...); nothing by default.
    public var exchangeAllowedNetworks: [IPNetwork] = []
    /// When set, the only Exchange host names (and their subdomains) ENS contacts; a
    /// listed host may also use a non-default port, and counts as the mailbox's
    /// Exchange for a forced re-registration.
    public var exchangeAllowedHosts: [String] = []
    /// An HTTP proxy ("http://host:port") for all Exchange traffic (Autodiscover, EWS,
    /// OAuth token endpoints); nil: none, and the environment's http_proxy, https_proxy
    /// and all_proxy are ignored. The destination is still checked against
    /// allowed_networks and allowed_hosts; the proxy's own address is not.
    public var exchangeProxy: String?
    /// Responder threads per process that may do a registration's Exchange work at
    /// once, and that a callback's lookups may hold for more than a second (a slow
    /// Exchange): the rest keep answering whatever Exchange does.
    public var exchangeMaximumConcurrentRegistrations = 1
    public var exchangeMaximumSlowCallbacks = 2
    public var exchangeAutodiscoverCacheLifetime: Duration = .hours(24)
    /// How long APNs should keep trying to deliver a new-mail notification.
    public var exchangeNotificationTTL: Duration = .seconds(86400)
    /// Failed proofs of possession (credentials Exchange refused, or an EWS endpoint
    /// that is not the mailbox's) a record takes per window before registrations for it
    /// are answered 429 without contacting Exchange: ENS is no password-guessing oracle.
    public var exchangeProofFailureLimit = 5
    public var exchangeProofWindow: Duration = .seconds(900)
    /// A callback with more new items than this gets one "N new messages" alert per
    /// device (and no GetItem) instead of one alert per item.
    public var exchangeMaximumItemsPerCallback = 50
    /// Pushes one record's callbacks may make per minute; past it a batch is
    /// summarized, and past that dropped (logged). Bounds what one mailbox can put in
    /// the shared spool.
    public var exchangeMaximumNotificationsPerMinute = 120
    /// Devices per user record: registering one more evicts the least recently active.
    public var maximumDevicesPerRecord = 20
    /// New user records one API token may create per hour (/getpublickey); the token
    /// ships in every install, so this bounds how fast anyone can fill the database.
    public var recordsPerTokenPerHour = 5000

    // Private notifications (docs/privacy.md)
    /// The least private mode any device's pushes use: a device that chose less is
    /// raised to it (`encrypted` without a key: `secure`).
    public var privacyMinimumMode: PrivacyMode = .preview
    /// How long a `secure` notification's content waits, sealed, for its one fetch.
    public var privacyFetchTTL: Duration = .seconds(86400)
    /// Notifications per device the history keeps (0: no history is kept), and for how long.
    public var historyCount = 20
    public var historyRetention: Duration = .hours(72)

    // Microsoft Graph (Exchange Online; docs/graph.md)
    /// The public https URL of the Graph notification location, ending in `/graph/`;
    /// empty: no Graph subscription can be made.
    public var graphCallbackURL = ""
    public var graphURL = "https://graph.microsoft.com"
    /// The Microsoft identity platform; a tenant's token endpoint is
    /// `<this>/<tenant id>/oauth2/v2.0/token`.
    public var graphLoginURL = "https://login.microsoftonline.com"
    /// PEM CA bundle for Graph and the token endpoint; nil uses the system store.
    public var graphCAFile: String?
    /// The lifetime asked for new and renewed subscriptions (Graph's cap for Outlook
    /// messages is 10,080 minutes today, 4,230 in older documents: 4,200 fits both).
    public var graphSubscriptionLifetime: Duration = .minutes(4200)
    /// Budget for a notification's lookups (sender and subject, unread count): Graph
    /// wants its answer within 3 s, and the sender's hand-off comes after this.
    public var graphLookupBudget: Duration = .milliseconds(1500)
    public var graphTimeout: Duration = .milliseconds(10000)
    /// Graph allows four requests in flight per mailbox; each responder process takes
    /// its share (this divided by fcgi.processes, at least one).
    public var graphMaximumRequestsPerMailbox = 4
    /// Lock files that keep `graphMaximumRequestsPerMailbox` across the host's processes.
    public var graphSlotDirectory = "/run/ens/graph-slots"
    /// The tenants whose mailboxes ENS serves through Graph, by a name of the
    /// operator's choosing (`graph.tenant.<name>.<field>`).
    public var graphTenants: [String: GraphTenantSettings] = [:]

    // SEG policy service
    /// Empty: no policy service, every device may receive mail.
    public var policyURL = ""
    public var policyCAFile: String?
    public var policyTimeout: Duration = .milliseconds(2000)
    /// Whether an unreachable policy service lets notifications through.
    public var policyAllowOnError = false

    /// Where each process writes its metrics for /metrics to add up (empty: off). A
    /// tmpfs such as /run is the right place: the files are rewritten every second.
    public var metricsDirectory = "/run/ens/metrics"
    /// The file holding the bearer token GET /metrics requires (empty: /metrics answers
    /// 404 to everyone; there is no unauthenticated /metrics).
    public var metricsTokenFile = ""

    public var logLevel = "info"
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
                        throw ConfigError(key: key, problem: "is the old name of \(alias.new), which is set too (line \(file.lines[alias.new] ?? 0)); keep only \(alias.new)")
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
        try checkDatabaseTLS(file)
        if !dbHosts.isEmpty, let dbSocket {
            throw ConfigError(key: "db.hosts", line: file.lines["db.hosts"], problem: "lists TCP servers, but db.socket is set (\(dbSocket)): set `db.socket =` (empty) to use them")
        }
    }

    /// The configured Graph tenants, each complete; a tenant missing a field, or a
    /// domain claimed by two tenants, is a configuration error.
    public func completeGraphTenants() throws(ConfigError) -> [GraphTenantSettings] {
        var owners: [String: String] = [:]
        return try graphTenants.keys.sorted().map { name throws(ConfigError) in
            let tenant = graphTenants[name]!
            for (field, missing) in [("id", tenant.tenantID.isEmpty), ("client_id", tenant.clientID.isEmpty), ("domains", tenant.domains.isEmpty),
                                     ("certificate_file", tenant.certificateFile.isEmpty), ("key_file", tenant.keyFile.isEmpty)] where missing {
                throw ConfigError(key: "graph.tenant.\(name).\(field)", problem: "is missing: a Graph tenant needs id, domains, client_id, certificate_file and key_file")
            }
            for domain in tenant.domains {
                if let other = owners[domain] {
                    throw ConfigError(key: "graph.tenant.\(name).domains", problem: "lists \(domain), which tenant \(other) lists too")
                }
                owners[domain] = name
            }
            return tenant
        }
    }

    /// This process's metrics file (nil when metrics are off), the directory created
    /// if missing.
    public func metricsFile(_ name: String) -> String? {
        guard !metricsDirectory.isEmpty else { return nil }
        if !Files.exists(metricsDirectory) { try? Files.createDirectory(metricsDirectory, mode: 0o750) }
        return metricsDirectory + "/" + name + ".prom"
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

    /// TLS settings that would be ignored are refused rather than silently unused.
    private func checkDatabaseTLS(_ file: ConfigFile) throws(ConfigError) {
        let anyTLS = dbTLSCAFile != nil || dbTLSCertificateFile != nil || dbTLSKeyFile != nil
        guard anyTLS else { return }
        guard let ca = dbTLSCAFile else {
            throw ConfigError(key: "db.tls_ca_file", problem: "is needed with db.tls_cert_file or db.tls_key_file: the server's certificate is always verified")
        }
        if dbSocket != nil {
            throw ConfigError(key: "db.tls_ca_file", line: file.lines["db.tls_ca_file"], problem: "applies to TCP connections, but db.socket is set (\(dbSocket ?? "")): for a database on another host set `db.socket =` (empty) and db.host")
        }
        if (dbTLSCertificateFile == nil) != (dbTLSKeyFile == nil) {
            throw ConfigError(key: dbTLSCertificateFile == nil ? "db.tls_cert_file" : "db.tls_key_file", problem: "a client certificate needs both db.tls_cert_file and db.tls_key_file")
        }
        for (key, path) in [("db.tls_ca_file", ca), ("db.tls_cert_file", dbTLSCertificateFile), ("db.tls_key_file", dbTLSKeyFile)] {
            guard let path else { continue }
            guard Files.exists(path) else { throw ConfigError(key: key, line: file.lines[key], problem: "names \(path), which does not exist") }
        }
    }

    // MARK: Secrets (read from their own files, never from the config file itself)

    /// The 32-byte master key, stored as 64 hex characters.
    public func masterKey() throws(ConfigError) -> AESGCMKey {
        let text = try Self.secretText(key: "security.master_key_file", path: masterKeyFile)
        guard let bytes = Hex.decode(text), bytes.count == AESGCMKey.keySize, let key = try? AESGCMKey(bytes: bytes) else {
            throw ConfigError(key: "security.master_key_file", problem: "must hold 64 hexadecimal characters (32 bytes); generate one with `openssl rand -hex 32`")
        }
        return key
    }

    /// The bearer token GET /metrics requires, read from `metrics.token_file`; nil when
    /// none is configured (then /metrics is off). At least 32 characters: a scraper's
    /// token is typed by no one, and a short one could be guessed.
    public func metricsToken() throws(ConfigError) -> String? {
        guard !metricsTokenFile.isEmpty else { return nil }
        let token = try Self.secretText(key: "metrics.token_file", path: metricsTokenFile)
        guard token.utf8.count >= 32, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "metrics.token_file", problem: "must hold a token of at least 32 printable characters without spaces; generate one with `openssl rand -hex 32`")
        }
        return token
    }

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

    /// The APNs signing key named by apns.key_file.
    /// The token-auth signing key, or nil when token auth is not configured (no
    /// apns.key_id and apns.team_id): then every topic needs a certificate.
    public func apnsSigningKeyPEM() throws(ConfigError) -> String? {
        if apnsKeyID.isEmpty && apnsTeamID.isEmpty {
            guard !apnsCertificates.isEmpty else {
                throw ConfigError(key: "apns.key_id", problem: "must be set (with apns.team_id and apns.key_file), or configure apns.certificate.<bundle id>, to run ens-apns")
            }
            return nil
        }
        guard !apnsKeyID.isEmpty else { throw ConfigError(key: "apns.key_id", problem: "must be set with apns.team_id") }
        guard !apnsTeamID.isEmpty else { throw ConfigError(key: "apns.team_id", problem: "must be set with apns.key_id") }
        return try Self.secretText(key: "apns.key_file", path: apnsKeyFile)
    }

    /// The bytes of a bundle's certificate file and its password ("" without a file).
    public func apnsCertificate(bundleID: String) throws(ConfigError) -> (bytes: [UInt8], password: String, isPKCS12: Bool) {
        guard let files = apnsCertificates[bundleID], !files.path.isEmpty else {
            throw ConfigError(key: "apns.certificate.\(bundleID)", problem: "a password file is configured but no certificate")
        }
        let bytes: [UInt8]
        do {
            bytes = try Files.read(files.path, limit: 1 << 20)
        } catch {
            throw ConfigError(key: "apns.certificate.\(bundleID)", problem: "names \(files.path), which cannot be read: \(error)")
        }
        let password = try files.passwordFile.map { path throws(ConfigError) in
            try Self.secretText(key: "apns.certificate_password_file.\(bundleID)", path: path)
        } ?? ""
        let lower = files.path.lowercased()
        return (bytes, password, lower.hasSuffix(".p12") || lower.hasSuffix(".pfx"))
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
