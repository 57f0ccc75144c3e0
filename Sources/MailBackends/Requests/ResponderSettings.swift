public import ENSConfig
public import ENSModel
public import EWS
public import POSIX
import Synchronization

/// What request handling reads of ens.conf, one part per component. `main` builds it
/// once from the configuration (a reload replaces only the limits, `reloadingLimits`);
/// a handler sees its component's settings and nothing else of the file.
public struct ResponderSettings: Sendable {
    /// How long a responder trusts its last database check when answering /alive.
    public var healthCache: Duration
    public var deviceAPI: DeviceAPISettings
    public var exchange: ExchangeSettings
    public var callbacks: CallbackSettings
    public var graph: GraphSettings
    public var privacy: PrivacySettings
    /// The SEG policy service; nil when none is configured.
    public var devicePolicy: DevicePolicySettings?
    /// Where /metrics reads every process's counters (empty: metrics off).
    public var metricsDirectory: String

    public init(healthCache: Duration = .seconds(1), deviceAPI: DeviceAPISettings = DeviceAPISettings(), exchange: ExchangeSettings = ExchangeSettings(),
                callbacks: CallbackSettings = CallbackSettings(), graph: GraphSettings = GraphSettings(),
                privacy: PrivacySettings = PrivacySettings(), devicePolicy: DevicePolicySettings? = nil, metricsDirectory: String = "") {
        self.healthCache = healthCache
        self.deviceAPI = deviceAPI
        self.exchange = exchange
        self.callbacks = callbacks
        self.graph = graph
        self.privacy = privacy
        self.devicePolicy = devicePolicy
        self.metricsDirectory = metricsDirectory
    }

    public init(_ configuration: ENSConfiguration) {
        self.init(
            healthCache: configuration.healthCache,
            deviceAPI: DeviceAPISettings(
                subscriptionGrace: configuration.subscriptionGrace, maximumDevicesPerRecord: configuration.maximumDevicesPerRecord,
                recordsPerTokenPerHour: configuration.recordsPerTokenPerHour,
                sealedMaximumAge: configuration.sealedMaximumAge, sealedRequirePurpose: configuration.sealedRequirePurpose
            ),
            exchange: ExchangeSettings(
                callbackURL: configuration.exchangeCallbackURL,
                client: EWSClientConfiguration(
                    caBundlePath: configuration.exchangeCAFile, connectTo: configuration.exchangeConnectTo,
                    totalTimeout: configuration.exchangeTimeout,
                    destinationPolicy: DestinationPolicy(allowedNetworks: configuration.exchangeAllowedNetworks,
                                                         allowedHostSuffixes: configuration.exchangeAllowedHosts),
                    proxy: configuration.exchangeProxy
                ),
                statusFrequency: configuration.exchangeStatusFrequency, requestTimeout: configuration.exchangeTimeout,
                registrationBudget: configuration.exchangeRegistrationBudget,
                autodiscoverCacheLifetime: configuration.exchangeAutodiscoverCacheLifetime,
                proofFailureLimit: configuration.exchangeProofFailureLimit, proofWindow: configuration.exchangeProofWindow
            ),
            callbacks: CallbackSettings(
                lookupBudget: configuration.exchangeItemTimeout, notificationTTL: configuration.exchangeNotificationTTL,
                maximumItemsPerCallback: configuration.exchangeMaximumItemsPerCallback,
                maximumNotificationsPerMinute: configuration.exchangeMaximumNotificationsPerMinute,
                maximumDevicesPerRecord: configuration.maximumDevicesPerRecord, pushSocket: configuration.pushSocket
            ),
            graph: GraphSettings(configuration),
            privacy: PrivacySettings(
                minimumMode: configuration.privacyMinimumMode, fetchTTL: configuration.privacyFetchTTL,
                historyCount: configuration.historyCount, historyRetention: configuration.historyRetention
            ),
            devicePolicy: configuration.policyURL.isEmpty ? nil : DevicePolicySettings(
                url: configuration.policyURL, caFile: configuration.policyCAFile, timeout: configuration.policyTimeout,
                allowOnError: configuration.policyAllowOnError
            ),
            metricsDirectory: configuration.metricsDirectory
        )
    }

    /// The limits a running responder takes over on SIGHUP (`systemctl reload`), so an
    /// operator can tighten or loosen them under load without a restart: each request
    /// reads them afresh. Everything else needs a restart.
    /// (Declared with each key: `reload: .responders` in Sources/ENSConfig/Keys.)
    public static let reloadableKeys: Set<String> = ConfigReload.responderKeys

    /// These settings with the reloadable limits taken from `configuration`.
    public func reloadingLimits(from configuration: ENSConfiguration) -> ResponderSettings {
        var next = self
        next.deviceAPI.maximumDevicesPerRecord = configuration.maximumDevicesPerRecord
        next.deviceAPI.recordsPerTokenPerHour = configuration.recordsPerTokenPerHour
        next.exchange.proofFailureLimit = configuration.exchangeProofFailureLimit
        next.exchange.proofWindow = configuration.exchangeProofWindow
        next.callbacks.maximumItemsPerCallback = configuration.exchangeMaximumItemsPerCallback
        next.callbacks.maximumNotificationsPerMinute = configuration.exchangeMaximumNotificationsPerMinute
        next.callbacks.maximumDevicesPerRecord = configuration.maximumDevicesPerRecord
        next.privacy.minimumMode = configuration.privacyMinimumMode
        next.privacy.historyCount = configuration.historyCount
        next.deviceAPI.sealedMaximumAge = configuration.sealedMaximumAge
        next.deviceAPI.sealedRequirePurpose = configuration.sealedRequirePurpose
        return next
    }
}

/// A responder process's settings as the last reload left them: its threads pick up a
/// new version before their next request (one atomic load per request).
public final class LiveSettings: Sendable {
    private let current: Mutex<ResponderSettings>
    private let versionCounter = Atomic<Int>(0)

    public init(_ settings: ResponderSettings) {
        current = Mutex(settings)
    }

    public var version: Int { versionCounter.load(ordering: .acquiring) }
    public var settings: ResponderSettings { current.withLock { $0 } }

    public func update(_ change: (ResponderSettings) -> ResponderSettings) {
        current.withLock { $0 = change($0) }
        versionCounter.add(1, ordering: .releasing)
    }
}

/// The device API's own limits.
public struct DeviceAPISettings: Sendable {
    /// Past a subscription's heartbeat interval, how long before check-ins hear that it
    /// is not subscribed (subscription.grace_seconds).
    public var subscriptionGrace: Duration
    /// Devices per record; one more evicts the least recently active (devices.max_per_record).
    public var maximumDevicesPerRecord: Int
    /// New records one ApiToken may create per hour (quota.records_per_token_per_hour).
    public var recordsPerTokenPerHour: Int
    /// Sealed values: the window around the server's time a `sealedAt` must fall in,
    /// and whether unbound forms are refused (sealed.max_age_seconds, sealed.require_purpose).
    public var sealedMaximumAge: Duration
    public var sealedRequirePurpose: Bool

    public init(subscriptionGrace: Duration = .seconds(300), maximumDevicesPerRecord: Int = 20, recordsPerTokenPerHour: Int = 5000,
                sealedMaximumAge: Duration = .seconds(900), sealedRequirePurpose: Bool = false) {
        self.subscriptionGrace = subscriptionGrace
        self.maximumDevicesPerRecord = maximumDevicesPerRecord
        self.recordsPerTokenPerHour = recordsPerTokenPerHour
        self.sealedMaximumAge = sealedMaximumAge
        self.sealedRequirePurpose = sealedRequirePurpose
    }
}

/// Private notifications (docs/privacy.md): the operator's floor, how long `secure`
/// content waits for its fetch, and the history.
public struct PrivacySettings: Sendable {
    /// The least private mode any push uses (privacy.minimum_mode).
    public var minimumMode: PrivacyMode
    public var fetchTTL: Duration
    /// Entries per device the history keeps and lists; 0 keeps none (history.count).
    public var historyCount: Int
    public var historyRetention: Duration

    public init(minimumMode: PrivacyMode = .preview, fetchTTL: Duration = .seconds(86400), historyCount: Int = 20, historyRetention: Duration = .hours(72)) {
        self.minimumMode = minimumMode
        self.fetchTTL = fetchTTL
        self.historyCount = historyCount
        self.historyRetention = historyRetention
    }
}

/// How the EWS backend registers mailboxes (the exchange.* keys).
public struct ExchangeSettings: Sendable {
    /// The public https URL of the callback location, ending in /ews/; empty: no
    /// registration can subscribe.
    public var callbackURL: String
    /// Where and how Exchange servers are reached: CA bundle, test redirections, the
    /// destination policy.
    public var client: EWSClientConfiguration
    /// StatusFrequency of new subscriptions: also their heartbeat interval.
    public var statusFrequency: Duration
    /// One EWS request's limit (the proof's GetFolder).
    public var requestTimeout: Duration
    /// One budget for a registration's whole Exchange conversation.
    public var registrationBudget: Duration
    /// How long an https Autodiscover answer is reused for its domain (zero: never).
    public var autodiscoverCacheLifetime: Duration
    /// Failed proofs a record takes per window before registrations are answered 429.
    public var proofFailureLimit: Int
    public var proofWindow: Duration

    public init(callbackURL: String = "", client: EWSClientConfiguration = EWSClientConfiguration(), statusFrequency: Duration = .minutes(30),
                requestTimeout: Duration = .seconds(10), registrationBudget: Duration = .seconds(20), autodiscoverCacheLifetime: Duration = .hours(24),
                proofFailureLimit: Int = 5, proofWindow: Duration = .seconds(900)) {
        self.callbackURL = callbackURL
        self.client = client
        self.statusFrequency = statusFrequency
        self.requestTimeout = requestTimeout
        self.registrationBudget = registrationBudget
        self.autodiscoverCacheLifetime = autodiscoverCacheLifetime
        self.proofFailureLimit = proofFailureLimit
        self.proofWindow = proofWindow
    }
}

/// What every backend's callbacks share: the lookup budget, the caps, and where the
/// notifications go.
public struct CallbackSettings: Sendable {
    /// One budget for a callback's lookups (sender, subject, unread count); past it
    /// devices get a generic alert (exchange.item_timeout_ms).
    public var lookupBudget: Duration
    /// How long the push service should keep trying to deliver a new-mail alert.
    public var notificationTTL: Duration
    /// Over this many new items, one "N new messages" alert per device.
    public var maximumItemsPerCallback: Int
    /// Pushes one record's callbacks may make per minute.
    public var maximumNotificationsPerMinute: Int
    public var maximumDevicesPerRecord: Int
    /// The sender's Unix socket.
    public var pushSocket: String

    public init(lookupBudget: Duration = .seconds(5), notificationTTL: Duration = .seconds(86400), maximumItemsPerCallback: Int = 50,
                maximumNotificationsPerMinute: Int = 120, maximumDevicesPerRecord: Int = 20, pushSocket: String = "/run/ens/apns.sock") {
        self.lookupBudget = lookupBudget
        self.notificationTTL = notificationTTL
        self.maximumItemsPerCallback = maximumItemsPerCallback
        self.maximumNotificationsPerMinute = maximumNotificationsPerMinute
        self.maximumDevicesPerRecord = maximumDevicesPerRecord
        self.pushSocket = pushSocket
    }
}

/// The SEG policy service a callback asks before pushing to a device with an EWS
/// device id.
public struct DevicePolicySettings: Sendable {
    public var url: String
    public var caFile: String?
    public var timeout: Duration
    /// Whether an unreachable service lets notifications through.
    public var allowOnError: Bool

    public init(url: String, caFile: String? = nil, timeout: Duration = .seconds(2), allowOnError: Bool = false) {
        self.url = url
        self.caFile = caFile
        self.timeout = timeout
        self.allowOnError = allowOnError
    }
}
