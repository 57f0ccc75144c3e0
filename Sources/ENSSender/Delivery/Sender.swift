public import ENSStore
public import ENSMetrics
internal import ENSModel
public import SenderWire
public import Logging
internal import Curl
internal import OpenSSL
internal import POSIX
import Synchronization

/// ens-sender: takes notifications on a Unix socket, spools them durably, and delivers
/// them over multiplexed HTTP/2 connections, each through the `PushProvider` of its
/// device token (APNs today). The spool, the retry queue and the multiplexer do not
/// know which provider a notification goes to.
public final class Sender: Sendable {
    // The providers belong to the delivery thread (checked in debug builds), the queue
    // is local to `deliver`; everything shared is behind a mutex or an atomic.
    public struct Settings: Sendable {
        /// PEM CA bundle for the push services; nil uses the system store.
        public var caBundlePath: String?
        public var maximumInFlight: Int
        /// Connections per push-service host and credential.
        public var connectionsPerHost: Int
        /// How long an app's notifications first wait after the service refused its
        /// credential (doubling, up to 15 minutes, while it stays refused).
        public var credentialPause: Duration

        public init(caBundlePath: String?, maximumInFlight: Int, connectionsPerHost: Int, credentialPause: Duration = .seconds(60)) {
            self.caBundlePath = caBundlePath
            self.maximumInFlight = maximumInFlight
            self.connectionsPerHost = connectionsPerHost
            self.credentialPause = credentialPause
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
    private let providers: ThreadConfined<[DeviceToken.Provider: any PushProvider]>
    private let settings: Settings
    /// Where deliveries and dead tokens are written back: each push's device's shard.
    private let databases: ShardDatabases
    private let logger: Logger
    private let arrivals = SynchronizedBox<[(entry: SpoolEntry, notification: PushNotification)]>([])
    /// How many just-spooled notifications delivery keeps parsed, so as not to read them
    /// back from the spool; beyond that (a backlog) they are read back when their turn comes.
    static let freshLimit = 2048
    private let stopping = Atomic<Bool>(false)
    private let inFlightCount = Atomic<Int>(0)
    private let pausedCredentials = Atomic<Int>(0)
    private let metrics: MetricsRecorder
    private let metricKeys = MetricsText.KeyCache()

    public init(spool: Spool, providers: [any PushProvider], settings: Settings,
                databases: ShardDatabases, metrics: MetricsRecorder, logger: Logger) {
        self.spool = spool
        self.metrics = metrics
        self.providers = ThreadConfined(Dictionary(providers.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first }))
        self.settings = settings
        self.databases = databases
        self.logger = logger
    }

    public func stop() {
        stopping.store(true, ordering: .releasing)
    }

    /// Sets the gauges (spool depth, requests in flight) before a metrics write.
    public func refreshGauges() {
        metrics.set("ens_push_spool_depth", Double(spool.count))
        metrics.set("ens_push_in_flight", Double(inFlightCount.load(ordering: .relaxed)))
        metrics.set("ens_push_paused_credentials", Double(pausedCredentials.load(ordering: .relaxed)))
    }

    private func count(_ outcome: String, _ provider: DeviceToken.Provider) {
        metrics.add(metricKeys.key("ens_push_notifications_total", [("provider", provider.rawValue), ("outcome", outcome)]))
    }

    /// Queues what `Ingest` made durable for delivery, in arrival order. Delivery looks
    /// every 20 ms at most rather than being woken for each: what arrived meanwhile then
    /// goes out together, in one write per connection (waking delivery for every arrival
    /// cost ens-sender 15% more CPU per notification in B6).
    public func enqueue(_ spooled: [(entry: SpoolEntry, notification: PushNotification)]) {
        arrivals.withLock { $0.append(contentsOf: spooled) }
    }

    // MARK: Delivery

    /// The delivery loop; runs until `stop()`. Replays the spool first.
    public func deliver() {
        // New notifications wait in arrival order (a FIFO read from `head`); retries wait
        // in `delayed` until their time. Neither is ever searched or shifted as a whole.
        var queue = DeliveryQueue()
        let providers = self.providers.withValue { $0 }
        let replay = spool.pending()
        if !replay.isEmpty { logger.info("replaying spooled notifications", metadata: ["spool.size": "\(replay.count)"]) }
        queue.ready = replay.map { Pending(entry: $0, attempts: 0, notBefore: 0) }
        let multiplexer: HTTP2Multiplexer
        do {
            // Each credential (APNs: the token, each certificate) gets its own connections.
            let credentialCount = providers.values.reduce(0) { $0 + $1.credentialCount }
            multiplexer = try HTTP2Multiplexer(configuration: .init(caBundlePath: settings.caBundlePath,
                                                                    connectionsPerHost: settings.connectionsPerHost * max(credentialCount, 1)))
        } catch {
            logger.critical("cannot start libcurl", metadata: ["error": "\(error)"])
            return
        }
        let feedback = ShardedDeviceFeedback(databases)
        var logRows = LogRowWriter()
        var inFlight: [Int: (pending: Pending, notification: PushNotification)] = [:]
        var pauses = CredentialPauses(firstPauseMilliseconds: Int64(settings.credentialPause.wholeMilliseconds))
        var nextTag = 0
        var lastUpkeep = MonotonicClock.milliseconds()
        var lastCompaction = MonotonicClock.milliseconds()
        // Notifications that waited for push credentials since the last line saying so.
        var credentialWaits = 0
        var credentialWaitsLogged: Int64 = 0
        // Notifications as Ingest parsed them, until delivery takes them (at most freshLimit).
        var fresh: [SpoolEntry: PushNotification] = [:]

        while !stopping.load(ordering: .acquiring) || !inFlight.isEmpty {
            let arrived = arrivals.withLock { arrived -> [(entry: SpoolEntry, notification: PushNotification)] in
                defer { arrived.removeAll(keepingCapacity: true) }
                return arrived
            }
            for (entry, notification) in arrived {
                queue.ready.append(Pending(entry: entry, attempts: 0, notBefore: 0))
                if fresh.count < Self.freshLimit { fresh[entry] = notification }
            }
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
            writeLogRows(&logRows, feedback, now: now)
            if !stopping.load(ordering: .acquiring) {
                while inFlight.count < settings.maximumInFlight, let pending = queue.next() {
                    let notification: PushNotification
                    do {
                        if let parsed = fresh.removeValue(forKey: pending.entry) {
                            notification = parsed
                        } else {
                            notification = try spool.load(pending.entry)
                        }
                    } catch where Spool.LoadFailure(error) == .transient {
                        // Acknowledged, and still on disk as written: kept, and read again
                        // after the usual backoff.
                        logger.error("cannot read a spooled notification now; it waits", metadata: [
                            "spool.entry": "\(pending.entry)", "error": "\(error)", "attempt": "\(pending.attempts + 1)",
                        ])
                        queue.delayed.append(Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1,
                                                     notBefore: now + DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts))))
                        continue
                    } catch {
                        logger.error("dropping an unreadable spooled notification",
                                     metadata: ["spool.entry": "\(pending.entry)", "error": "\(error)"])
                        spool.remove(pending.entry)
                        continue
                    }
                    // Whatever becomes of the push, its log row is written, as when the
                    // responder wrote it before the hand-off.
                    logRows.note(pending.entry, notification)
                    let kind = notification.deviceToken.provider
                    if notification.expiration * 1000 < now {
                        logger.warning("notification expired before delivery",
                                       metadata: ["notification.id": "\(notification.id)", "attempts": "\(pending.attempts)"])
                        finish(pending.entry, &logRows)
                        count("expired", kind)
                        continue
                    }
                    switch pauses.gate(CredentialPauses.key(provider: kind.rawValue, topic: notification.topic), now: now) {
                    case .send, .probe:
                        break
                    case .wait(let until):
                        // Its app's credential was refused: kept, not sent, not counted as an attempt.
                        queue.delayed.append(Pending(entry: pending.entry, attempts: Int(pending.attempts), notBefore: until))
                        continue
                    }
                    let request: PushRequest
                    do {
                        guard let provider = providers[kind] else { throw PushRequestError.credentials("no \(kind.rawValue) provider is configured") }
                        request = try provider.request(for: notification)
                    } catch PushRequestError.temporarilyUnavailable(let problem) {
                        // Every waiting notification comes back here at each retry: one line
                        // per 10 s says how many (a stuck token endpoint made 90 lines a second).
                        credentialWaits += 1
                        if now - credentialWaitsLogged >= 10_000 {
                            logger.warning("push credentials unavailable; notifications wait", metadata: [
                                "push.provider": "\(kind.rawValue)", "push.topic": "\(notification.topic)", "error": "\(problem)",
                                "notifications": "\(credentialWaits)",
                            ])
                            credentialWaits = 0
                            credentialWaitsLogged = now
                        }
                        queue.delayed.append(Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1,
                                                     notBefore: now + DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts),
                                                         capMilliseconds: 30_000)))
                        continue
                    } catch {
                        logger.error("cannot build a push request; dropping the notification", metadata: [
                            "push.provider": "\(kind.rawValue)", "push.topic": "\(notification.topic)",
                            "notification.id": "\(notification.id)", "error": "\(error)",
                        ])
                        finish(pending.entry, &logRows)
                        count("dropped", kind)
                        continue
                    }
                    nextTag += 1
                    do {
                        try multiplexer.post(tag: nextTag, url: request.url, headers: request.headers, body: request.body,
                                             clientCertificate: request.clientCertificate)
                        inFlight[nextTag] = (pending, notification)
                    } catch {
                        logger.error("cannot start a push request", metadata: ["push.provider": "\(kind.rawValue)", "error": "\(error)"])
                        queue.delayed.append(Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1,
                                                     notBefore: now + DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts))))
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
                guard let provider = providers[notification.deviceToken.provider] else { continue }
                if let retry = handle(completion, pending: pending, notification: notification,
                                      provider: provider, feedback: feedback, pauses: &pauses, logRows: &logRows) {
                    queue.delayed.append(retry)
                }
                pausedCredentials.store(pauses.pausedCount, ordering: .relaxed)
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
        writeLogRows(&logRows, feedback, now: WallClock.milliseconds(), force: true)
        logger.info("delivery stopped", metadata: ["spool.size": "\(spool.count)"])
    }

    /// The delivery of `entry` ended: the spool forgets it, now or once its log row is written.
    private func finish(_ entry: SpoolEntry, _ logRows: inout LogRowWriter) {
        if logRows.finish(entry) { spool.remove(entry) }
    }

    /// Writes the log rows noted so far when their batch is due; the spool forgets the
    /// notifications whose delivery ended before their row was written.
    private func writeLogRows(_ logRows: inout LogRowWriter, _ feedback: ShardedDeviceFeedback, now: Int64, force: Bool = false) {
        let flushed = logRows.flush(nowMilliseconds: now, force: force) { shard, rows in
            guard let database = feedback.shard(shard)?.database else { return }
            try NotificationLog.insert(rows, into: database)
        }
        for entry in flushed.released { spool.remove(entry) }
        if let failure = flushed.failure {
            // The rows stay noted and their notifications spooled: the next flush tries
            // again, and a restart replays them.
            logger.warning("cannot write notification log rows; they wait, and their notifications stay spooled",
                           metadata: ["db.error": "\(failure.error)", "rows": "\(failure.rowsWaiting)"])
        }
    }

    private func handle(_ completion: HTTP2Multiplexer.Completion, pending: Pending, notification: PushNotification,
                        provider: any PushProvider, feedback: ShardedDeviceFeedback, pauses: inout CredentialPauses,
                        logRows: inout LogRowWriter) -> Pending? {
        let kind = notification.deviceToken.provider
        let answer: PushAnswer
        switch completion.result {
        case .success(let response):
            answer = PushAnswer(status: response.status, body: response.body, retryAfter: PushAnswer.retryAfter(response.header("retry-after")))
        case .failure(let error):
            logger.debug("push request failed", metadata: ["push.provider": "\(kind.rawValue)", "error": "\(error)"])
            answer = PushAnswer(status: nil, body: [])
        }
        let verdict = provider.verdict(for: answer)
        let status = answer.status
        metrics.add(metricKeys.key("ens_push_responses_total", [
            ("provider", kind.rawValue), ("code", String(status ?? 0)), ("reason", verdict.reason),
        ]))
        let now = WallClock.milliseconds()
        let credential = CredentialPauses.key(provider: kind.rawValue, topic: notification.topic)
        switch verdict.action {
        case .credentialRefused:
            break
        case .retry, .refreshCredentialsAndRetry:
            pauses.inconclusive(credential)
        case .delivered, .disableToken, .drop:
            // The service got past the credential.
            if pauses.accepted(credential) {
                logger.notice("the push service accepts the app's credential again; its notifications are delivered", metadata: [
                    "push.provider": "\(kind.rawValue)", "push.topic": "\(notification.topic)",
                ])
            }
        }
        switch verdict.action {
        case .credentialRefused(let why):
            count("credential_refused", kind)
            let (until, refusal) = pauses.refused(credential, now: now)
            let metadata: Logger.Metadata = [
                "push.provider": "\(kind.rawValue)", "push.topic": "\(notification.topic)", "push.answer": "\(why)",
                "pause.seconds": "\((until - now + 999) / 1000)",
            ]
            switch refusal {
            case .began:
                logger.critical("""
                    the push service refused the app's credential: its notifications are kept in the spool and wait until the \
                    credential is fixed (then restart ens-sender) or they expire
                    """, metadata: metadata)
            case .extended:
                logger.error("the push service still refuses the app's credential; its notifications keep waiting", metadata: metadata)
            case .alreadyPaused:
                break
            }
            return Pending(entry: pending.entry, attempts: Int(pending.attempts), notBefore: until)
        case .delivered:
            finish(pending.entry, &logRows)
            count("delivered", kind)
            if let row = notification.deviceRowID { feedback.shard(notification.shard)?.delivered(deviceRowID: row, at: .now()) }
            return nil
        case .disableToken(let timestamp):
            finish(pending.entry, &logRows)
            count("disabled", kind)
            logger.info("the push service rejected a device token; disabling it", metadata: [
                "push.provider": "\(kind.rawValue)", "push.status": "\(status ?? 0)", "push.reason": "\(verdict.reason)",
                "device.row": "\(notification.deviceRowID ?? 0)",
            ])
            if let row = notification.deviceRowID {
                do {
                    try feedback.shard(notification.shard)?.disable(deviceRowID: row,
                                                                    invalidSince: Timestamp(millisecondsSinceEpoch: timestamp ?? now))
                } catch {
                    logger.warning("cannot disable a device token", metadata: ["db.error": "\(error)"])
                }
            }
            return nil
        case .refreshCredentialsAndRetry:
            do { try provider.refreshCredentials() } catch {
                logger.error("cannot refresh push credentials", metadata: ["push.provider": "\(kind.rawValue)", "error": "\(error)"])
            }
            // Backed off like any retry: if the provider keeps saying "expired" (a skewed
            // clock, say) while the credential is too young to renew, this must not spin.
            return Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1,
                           notBefore: now + DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts)))
        case .retry:
            // Never sooner than the provider's Retry-After.
            let backoff = DeliveryPolicy.retryDelayMilliseconds(attempt: Int(pending.attempts),
                                                                capMilliseconds: status == nil ? 30_000 : 15 * 60 * 1000)
            let delay = max(backoff, Int64(verdict.retryAfter?.wholeMilliseconds ?? 0))
            logger.debug("push delivery will be retried", metadata: [
                "push.provider": "\(kind.rawValue)", "push.status": "\(status ?? 0)", "retry.delay_ms": "\(delay)",
            ])
            return Pending(entry: pending.entry, attempts: Int(pending.attempts) + 1, notBefore: now + delay)
        case .drop(let why):
            finish(pending.entry, &logRows)
            count("dropped", kind)
            logger.warning("the push service refused a notification; dropping it", metadata: [
                "push.provider": "\(kind.rawValue)", "push.answer": "\(why)", "notification.id": "\(notification.id)",
            ])
            return nil
        }
    }
}
