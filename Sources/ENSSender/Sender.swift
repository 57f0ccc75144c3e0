public import ENSCore
public import Logging
internal import Curl
public import MariaDB
public import OpenSSL
internal import POSIX
import Synchronization

/// How ens-apns authenticates to APNs, per topic (bundle id): a client certificate if
/// one is configured for the topic, else the shared provider token (JWT); a topic with
/// neither cannot be delivered.
public struct APNsCredentials: Sendable {
    public let token: ProviderToken?
    public let certificates: [String: ClientIdentity]

    public init(token: ProviderToken?, certificates: [String: ClientIdentity]) {
        self.token = token
        self.certificates = certificates
    }
}

/// ens-apns: takes notifications on a Unix socket, spools them durably, and delivers
/// them to APNs over multiplexed HTTP/2 connections.
public final class Sender: @unchecked Sendable {
    // @unchecked: `deliveryState` is touched only by the delivery thread; everything
    // shared is behind a mutex or an atomic.
    public struct Settings: Sendable {
        public var productionURL: String
        public var sandboxURL: String
        public var caBundlePath: String?
        public var maximumInFlight: Int
        public var connectionsPerHost: Int

        public init(productionURL: String, sandboxURL: String, caBundlePath: String?, maximumInFlight: Int, connectionsPerHost: Int) {
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.caBundlePath = caBundlePath
            self.maximumInFlight = maximumInFlight
            self.connectionsPerHost = connectionsPerHost
        }
    }

    struct Pending {
        let entry: SpoolEntry
        var attempts: Int32
        var notBefore: Int64

        init(entry: SpoolEntry, attempts: Int, notBefore: Int64) {
            self.entry = entry
            self.attempts = Int32(clamping: attempts)
            self.notBefore = notBefore
        }
    }

    /// The delivery thread's queue: a FIFO of ready notifications and a list of
    /// retries waiting for their time.
    struct DeliveryQueue {
        var ready: [Pending] = []
        var head = 0
        var delayed: [Pending] = []
        private var lastPromotion: Int64 = 0

        var hasReady: Bool { head < ready.count }

        mutating func next() -> Pending? {
            guard head < ready.count else { return nil }
            let pending = ready[head]
            head += 1
            if head > 4096 && head * 2 > ready.count {
                ready.removeFirst(head)
                head = 0
            }
            return pending
        }

        /// Moves retries whose time has come to the ready queue (checked every 100 ms).
        mutating func promoteDue(now: Int64) {
            guard !delayed.isEmpty, now - lastPromotion >= 100 else { return }
            lastPromotion = now
            var waiting: [Pending] = []
            for pending in delayed {
                if pending.notBefore <= now { ready.append(pending) } else { waiting.append(pending) }
            }
            delayed = waiting
        }
    }

    private let spool: Spool
    private let credentials: APNsCredentials
    /// The certificates in the PEM form libcurl takes, made once.
    private let certificateBlobs: [String: ClientCertificate]
    private let settings: Settings
    private let database: MariaDBConfiguration
    private let logger: Logger
    private let arrivals = SynchronizedBox<[SpoolEntry]>([])
    private let stopping = Atomic<Bool>(false)
    private let inFlightCount = Atomic<Int>(0)
    private let metrics: MetricsRecorder

    public init(spool: Spool, credentials: APNsCredentials, settings: Settings, database: MariaDBConfiguration, metrics: MetricsRecorder, logger: Logger) {
        self.spool = spool
        self.metrics = metrics
        self.credentials = credentials
        certificateBlobs = credentials.certificates.mapValues {
            ClientCertificate(certificatePEM: $0.certificatePEM, privateKeyPEM: $0.privateKeyPEM)
        }
        self.settings = settings
        self.database = database
        self.logger = logger
    }

    public func stop() {
        stopping.store(true, ordering: .releasing)
    }

    /// Sets the gauges (spool depth, requests in flight) before a metrics write.
    public func refreshGauges() {
        metrics.set("ens_apns_spool_depth", Double(spool.count))
        metrics.set("ens_apns_in_flight", Double(inFlightCount.load(ordering: .relaxed)))
    }

    private func count(_ outcome: String) {
        metrics.add(MetricsText.key("ens_apns_notifications_total", [("outcome", outcome)]))
    }

    /// Queues what `Ingest` made durable for delivery, in arrival order.
    public func enqueue(_ entries: [SpoolEntry]) {
        arrivals.withLock { $0.append(contentsOf: entries) }
    }

    // MARK: Delivery

    /// The delivery loop; runs until `stop()`. Replays the spool first.
    public func deliver() {
        // New notifications wait in arrival order (a FIFO read from `head`); retries wait
        // in `delayed` until their time. Neither is ever searched or shifted as a whole.
        var queue = DeliveryQueue()
        let replay = spool.pending()
        if !replay.isEmpty { logger.info("replaying spooled notifications", metadata: ["spool.size": "\(replay.count)"]) }
        queue.ready = replay.map { Pending(entry: $0, attempts: 0, notBefore: 0) }
        let multiplexer: HTTP2Multiplexer
        do {
            // Each credential (the token, each certificate) gets its own connections.
            let credentialCount = certificateBlobs.count + (credentials.token == nil ? 0 : 1)
            multiplexer = try HTTP2Multiplexer(configuration: .init(caBundlePath: settings.caBundlePath,
                                                                    connectionsPerHost: settings.connectionsPerHost * max(credentialCount, 1)))
        } catch {
            logger.critical("cannot start libcurl", metadata: ["error": "\(error)"])
            return
        }
        let feedbackDatabase = Connection(configuration: database)
        let feedback = DeviceFeedback(database: feedbackDatabase)
        var inFlight: [Int: (pending: Pending, notification: PushNotification)] = [:]
        var nextTag = 0
        var lastUpkeep = MonotonicClock.milliseconds()
        var lastCompaction = MonotonicClock.milliseconds()

        while !stopping.load(ordering: .acquiring) || !inFlight.isEmpty {
            let arrived = arrivals.withLock { arrived -> [SpoolEntry] in
                defer { arrived.removeAll(keepingCapacity: true) }
                return arrived
            }
            queue.ready.append(contentsOf: arrived.map { Pending(entry: $0, attempts: 0, notBefore: 0) })
            let now = WallClock.milliseconds()
            queue.promoteDue(now: now)
            // Notifications retried for hours would otherwise each keep a finished segment on disk.
            if MonotonicClock.milliseconds() - lastCompaction > 60_000 {
                let moved = spool.compact()
                if moved > 0 { logger.info("moved notifications out of finished spool segments", metadata: ["spool.moved": "\(moved)"]) }
                lastCompaction = MonotonicClock.milliseconds()
            }
            do {
                try feedback.flush(nowMilliseconds: now)
            } catch {
                logger.warning("cannot record deliveries", metadata: ["db.error": "\(error)"])
            }
            if !stopping.load(ordering: .acquiring) {
                while inFlight.count < settings.maximumInFlight, let pending = queue.next() {
                    let notification: PushNotification
                    do {
                        notification = try spool.load(pending.entry)
                    } catch {
                        logger.error("dropping an unreadable spooled notification", metadata: ["spool.entry": "\(pending.entry)", "error": "\(error)"])
                        spool.remove(pending.entry)
                        continue
                    }
                    if notification.expiration * 1000 < now {
                        logger.warning("notification expired before delivery", metadata: ["notification.id": "\(notification.id)", "attempts": "\(pending.attempts)"])
                        spool.remove(pending.entry)
                        count("expired")
                        continue
                    }
                    nextTag += 1
                    let certificate = certificateBlobs[notification.topic]
                    guard certificate != nil || credentials.token != nil else {
                        logger.error("no APNs credentials for this topic; dropping the notification",
                                     metadata: ["apns.topic": "\(notification.topic)", "notification.id": "\(notification.id)"])
                        spool.remove(pending.entry)
                        count("dropped")
                        continue
                    }
                    do {
                        try multiplexer.post(tag: nextTag, url: url(for: notification), headers: try headers(for: notification, certificate: certificate != nil),
                                             body: notification.payload, clientCertificate: certificate)
                        inFlight[nextTag] = (pending, notification)
                    } catch {
                        logger.error("cannot start an APNs request", metadata: ["error": "\(error)"])
                        queue.delayed.append(Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1, notBefore: now + DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts))))
                    }
                }
            }
            inFlightCount.store(inFlight.count, ordering: .relaxed)
            if inFlight.isEmpty {
                sleepMilliseconds(queue.hasReady ? 1 : 20)
                continue
            }
            for completion in multiplexer.poll(timeoutMilliseconds: 20) {
                guard let (pending, notification) = inFlight.removeValue(forKey: completion.tag) else { continue }
                if let retry = handle(completion, pending: pending, notification: notification, feedback: feedback) {
                    queue.delayed.append(retry)
                }
            }
            if MonotonicClock.milliseconds() - lastUpkeep > 10_000 {
                multiplexer.upkeep()
                lastUpkeep = MonotonicClock.milliseconds()
            }
        }
        do {
            try feedback.flush(nowMilliseconds: WallClock.milliseconds(), force: true)
        } catch {
            logger.warning("cannot record deliveries", metadata: ["db.error": "\(error)"])
        }
        logger.info("delivery stopped", metadata: ["spool.size": "\(spool.count)"])
    }

    private func handle(_ completion: HTTP2Multiplexer.Completion, pending: Pending, notification: PushNotification, feedback: DeviceFeedback) -> Pending? {
        var status: Int?
        var reason: String?
        var timestamp: Int64?
        switch completion.result {
        case .success(let response):
            status = response.status
            if let body = try? JSONParser.parse(response.body) {
                reason = body["reason"]?.stringValue
                if case .number(let text)? = body["timestamp"] { timestamp = Int64(text) }
            }
        case .failure(let error):
            logger.debug("APNs request failed", metadata: ["error": "\(error)"])
        }
        metrics.add(MetricsText.key("ens_apns_responses_total", [("status", String(status ?? 0)), ("reason", Self.reasonLabel(reason))]))
        let action = DeliveryPolicy.action(status: status, reason: reason, timestamp: timestamp)
        let now = WallClock.milliseconds()
        switch action {
        case .delivered:
            spool.remove(pending.entry)
            count("delivered")
            if let row = notification.deviceRowID { feedback.delivered(deviceRowID: row, at: .now()) }
            return nil
        case .disableToken(let timestamp):
            spool.remove(pending.entry)
            count("disabled")
            logger.info("APNs rejected a device token; disabling it", metadata: [
                "apns.status": "\(status ?? 0)", "apns.reason": "\(reason ?? "")", "device.row": "\(notification.deviceRowID ?? 0)",
            ])
            if let row = notification.deviceRowID {
                do {
                    try feedback.disable(deviceRowID: row, invalidSince: Timestamp(millisecondsSinceEpoch: timestamp ?? now))
                } catch {
                    logger.warning("cannot disable a device token", metadata: ["db.error": "\(error)"])
                }
            }
            return nil
        case .refreshProviderTokenAndRetry:
            do { try credentials.token?.expired() } catch { logger.error("cannot mint a provider token", metadata: ["error": "\(error)"]) }
            // Backed off like any retry: if APNs keeps saying "expired" (a skewed clock,
            // say) while the token is too young to re-mint, this must not spin.
            return Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1,
                           notBefore: now + DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts)))
        case .retry:
            let delay = DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts), capMilliseconds: status == nil ? 30_000 : 15 * 60 * 1000)
            logger.debug("APNs delivery will be retried", metadata: ["apns.status": "\(status ?? 0)", "retry.delay_ms": "\(delay)"])
            return Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1, notBefore: now + delay)
        case .drop(let why):
            spool.remove(pending.entry)
            count("dropped")
            logger.warning("APNs refused a notification; dropping it", metadata: ["apns.answer": "\(why)", "notification.id": "\(notification.id)"])
            return nil
        }
    }

    /// Apple's reason strings are a short fixed vocabulary; anything else (a broken
    /// answer) is folded into "other" so a label cannot grow without bound.
    static func reasonLabel(_ reason: String?) -> String {
        guard let reason, !reason.isEmpty else { return "" }
        guard reason.utf8.count <= 40, reason.utf8.allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }) else { return "other" }
        return reason
    }

    private func url(for notification: PushNotification) -> String {
        (notification.environment == .production ? settings.productionURL : settings.sandboxURL) + "/3/device/" + notification.deviceToken.hex
    }

    /// Apple's headers; `authorization` only for token auth (a certificate
    /// authenticates the connection instead).
    private func headers(for notification: PushNotification, certificate: Bool) throws -> [(String, String)] {
        var headers: [(String, String)] = []
        if !certificate, let token = credentials.token {
            headers.append(("authorization", "bearer " + (try token.token())))
        }
        return headers + [
            ("apns-topic", notification.topic),
            ("apns-push-type", notification.pushType.rawValue),
            ("apns-priority", String(notification.priority)),
            ("apns-expiration", String(notification.expiration)),
            ("apns-collapse-id", notification.id),
            ("content-type", "application/json"),
        ]
    }
}
