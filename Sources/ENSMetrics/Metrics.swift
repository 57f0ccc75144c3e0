public import Logging
public import POSIX
import Synchronization
public import ENSModel

/// Prometheus metrics, shared between processes through small files.
///
/// Each ENS process (every responder worker slot, ens-sender) keeps its counters in
/// memory and writes them once a second to `<metrics.dir>/<name>.prom` as plain
/// `series value` lines. The /metrics endpoint, answered by whichever responder nginx
/// picks, adds up the series of all files and renders the exposition format with HELP
/// and TYPE lines. A process that restarts reloads its own file first, so counters only
/// ever grow. A gauge says how things are now, so a file its process has stopped writing
/// (a killed or stopped process) no longer counts towards the gauges; its counters do.
public enum MetricsText {
    /// One series key: `name` or `name{label="value",...}` (values escaped).
    public static func key(_ name: String, _ labels: [(String, String)] = []) -> String {
        guard !labels.isEmpty else { return name }
        return name + "{" + labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
    }

    /// Series keys made once and then looked up: a hot path that counts by a few
    /// labels of fixed values (the sender, for every push) would otherwise build the
    /// same text for every event. It keeps at most `capacity` keys, so labels that come
    /// from outside (a push service's reason) cannot grow it without bound.
    public final class KeyCache: Sendable {
        private let keys = Mutex<[[String]: String]>([:])
        private let capacity: Int

        public init(capacity: Int = 512) {
            self.capacity = capacity
        }

        public func key(_ name: String, _ labels: [(String, String)]) -> String {
            let parts = [name] + labels.flatMap { [$0.0, $0.1] }
            if let known = keys.withLock({ $0[parts] }) { return known }
            let made = MetricsText.key(name, labels)
            keys.withLock { if $0.count < capacity { $0[parts] = made } }
            return made
        }
    }

    static func escape(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// `series value` lines, sorted.
    public static func lines(_ values: [String: Double]) -> String {
        values.keys.sorted().map { "\($0) \(format(values[$0]!))" }.joined(separator: "\n") + "\n"
    }

    /// Reads `series value` lines; anything else is skipped.
    public static func parse(_ text: String) -> [String: Double] {
        var values: [String: Double] = [:]
        for line in text.split(separator: "\n") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            values[String(line[..<space])] = value
        }
        return values
    }

    public static func format(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    /// The family a series belongs to (histogram parts share their base name).
    static func family(of key: String) -> String {
        let name = key.split(separator: "{", maxSplits: 1).first.map(String.init) ?? key
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if families[base]?.type == "histogram" { return base }
        }
        return name
    }

    /// Every metric ENS exports: type and help text.
    public static let families: [String: (type: String, help: String)] = [
        "ens_http_requests_total": ("counter", "Requests answered by the responders, by endpoint and HTTP status."),
        "ens_http_request_duration_seconds": ("histogram", "Time from reading a request to writing its answer, by endpoint."),
        "ens_push_responses_total": ("counter",
            "Push-service answers by provider, HTTP status (code) and the provider's reason (code 0: no answer, a transport failure)."),
        "ens_push_intake_total": ("counter", "Notifications handed to the sender, by outcome: accepted into the spool or refused."),
        "ens_push_notifications_total": ("counter",
            "Spooled notifications by provider and outcome: delivered, dropped, disabled (token rejected), expired."),
        "ens_push_spool_depth": ("gauge", "Notifications in the spool, not yet delivered."),
        "ens_push_in_flight": ("gauge", "Push-service requests in flight."),
        "ens_push_paused_credentials": ("gauge", "Apps whose push credential the service refused; their notifications wait in the spool."),
        "ens_subscriptions": ("gauge", "User records by mail subscription state, as ens-cron gauges last counted them."),
        "ens_devices": ("gauge", "Devices by state, as ens-cron gauges last counted them."),
        "ens_gauges_counted_at_seconds": ("gauge",
            "When ens-cron gauges last counted ens_subscriptions and ens_devices, in seconds since the Unix epoch (0: never)."),
        "ens_mail_events_total": ("counter", "Change notifications a mail backend sent, by outcome: delivered, duplicate, or dropped and why."),
        "ens_metrics_sources": ("gauge", "Processes whose metrics files were read for this answer."),
        "ens_metrics_stale_sources": ("gauge",
            "Metrics files not written for a while (their process is gone): counted for counters, not for gauges."),
        "process_start_time_seconds": ("gauge",
            "When each ENS process started, in seconds since the Unix epoch, by process (fcgi-N: a responder worker slot, apns: the sender)."),
    ]

    /// The label that names a process in `process_start_time_seconds`.
    public static func startTimeKey(process: String) -> String {
        key("process_start_time_seconds", [("process", process)])
    }

    /// A metrics file older than this belongs to a process that is gone (a live one
    /// rewrites its file every second).
    public static let staleAfter: Duration = .seconds(10)

    /// The exposition format for summed values, families in a stable order.
    public static func render(_ values: [String: Double]) -> String {
        var byFamily: [String: [String]] = [:]
        for key in values.keys { byFamily[family(of: key), default: []].append(key) }
        var text = ""
        for family in byFamily.keys.sorted() {
            if let described = families[family] {
                text += "# HELP \(family) \(described.help)\n# TYPE \(family) \(described.type)\n"
            }
            for key in byFamily[family]!.sorted(by: seriesOrder) { text += "\(key) \(format(values[key]!))\n" }
        }
        return text
    }

    /// Histogram buckets in `le` order (so `+Inf` comes last), everything else by name.
    private static func seriesOrder(_ a: String, _ b: String) -> Bool {
        func le(_ key: String) -> Double? {
            guard let range = key.firstRange(of: "le=\"") else { return nil }
            let rest = key[range.upperBound...]
            let text = rest.prefix { $0 != "\"" }
            return text == "+Inf" ? .infinity : Double(text)
        }
        if let x = le(a), let y = le(b), a.replacingLE() == b.replacingLE() { return x < y }
        return a < b
    }

    /// Sums every `*.prom` file of `directory`: every series of a live process's file,
    /// only the counters and histograms of a stale one (see `staleAfter`). `sources`
    /// counts the live files, `staleSources` the others.
    public static func collect(directory: String, now: Timestamp = .now())
        throws(SystemError) -> (values: [String: Double], sources: Int, staleSources: Int) {
        var total: [String: Double] = [:]
        var sources = 0
        var staleSources = 0
        let staleBefore = now.millisecondsSinceEpoch - Int64(staleAfter.wholeMilliseconds)
        // No directory yet (no process has written its file) is no sources, and the
        // answer says so (`ens_metrics_sources` 0). One that cannot be read (its
        // permissions, not a directory) is a misconfiguration, thrown: summing nothing
        // would look like a host where nothing runs.
        let names: [String]
        do {
            names = try Files.list(directory)
        } catch where error.isMissing {
            names = []
        }
        for name in names where name.hasSuffix(".prom") {
            let path = directory + "/" + name
            guard let modified = Files.signature(path)?.modified,
                  let bytes = try? Files.read(path, limit: 4 << 20),
                  let text = String(validating: bytes, as: UTF8.self) else { continue }
            let stale = modified / 1_000_000 < staleBefore
            if stale { staleSources += 1 } else { sources += 1 }
            for (key, value) in parse(text) where !stale || families[family(of: key)]?.type != "gauge" {
                total[key, default: 0] += value
            }
        }
        return (total, sources, staleSources)
    }
}

extension String {
    fileprivate func replacingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }

    /// The key with its `le` label blanked, to group a histogram's buckets.
    fileprivate func replacingLE() -> String {
        guard let range = firstRange(of: "le=\"") else { return self }
        let end = self[range.upperBound...].firstIndex(of: "\"") ?? endIndex
        return String(self[..<range.upperBound]) + String(self[end...])
    }
}

/// A process's counters: thread-safe, written to its metrics file by `write(to:)`.
public final class MetricsRecorder: Sendable {
    private let values: Mutex<[String: Double]>
    private let stopping = Mutex(false)
    public let file: String?

    /// `file` nil: metrics are kept but never written (no metrics.dir). The file's name
    /// without `.prom` names the process in `process_start_time_seconds`.
    public init(file: String?, startedAt: Timestamp = .now()) {
        self.file = file
        // Counters continue from what this process's predecessor wrote.
        let previous = file.flatMap { try? Files.read($0, limit: 4 << 20) }.flatMap { String(validating: $0, as: UTF8.self) }
        var initial = previous.map(MetricsText.parse) ?? [:]
        if let file {
            let process = String(file.split(separator: "/").last ?? "").replacingSuffix(".prom")
            initial[MetricsText.startTimeKey(process: process)] = Double(startedAt.millisecondsSinceEpoch / 1000)
        }
        values = Mutex(initial)
    }

    public func add(_ key: String, _ amount: Double = 1) {
        values.withLock { $0[key, default: 0] += amount }
    }

    public func set(_ key: String, _ value: Double) {
        values.withLock { $0[key] = value }
    }

    public var snapshot: [String: Double] { values.withLock { $0 } }

    /// Writes the snapshot to this process's file (atomically; readers never see half).
    public func write() throws {
        guard let file else { return }
        try Files.writeAtomically(Array(MetricsText.lines(snapshot).utf8), to: file, mode: 0o640)
    }

    /// Writes the file every `intervalMilliseconds` until `stop()`, after `refresh`
    /// (which sets gauges); a last write on the way out.
    public func run(intervalMilliseconds: Int = 1000, logger: Logger, refresh: () -> Void = {}) {
        guard file != nil else { return }
        var failing = false
        while !stopping.withLock({ $0 }) {
            sleepMilliseconds(intervalMilliseconds)
            refresh()
            do {
                try write()
                failing = false
            } catch {
                if !failing { logger.warning("cannot write the metrics file", metadata: ["error": "\(error)"]) }
                failing = true
            }
        }
        refresh()
        // The last write as the process stops: a failure here is the one the loop
        // already logged (the file's directory), and nothing is left to retry it.
        try? write()
    }

    public func stop() {
        stopping.withLock { $0 = true }
    }
}

/// One responder thread's request counters: fixed slots indexed by endpoint, status
/// and latency bucket, so counting a request builds no strings and takes only this
/// thread's (uncontended) lock. The metrics writer adds all threads up once a second.
public final class RequestCounters: Sendable {
    public static let statuses = [200, 202, 400, 401, 403, 404, 405, 413, 415, 429, 500, 503]
    /// Upper bounds (seconds) of the latency histogram's buckets.
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private struct State {
        var counts: [Int64]     // labels × (statuses + 1, the last for any other status)
        var buckets: [Int64]    // labels × (latency buckets + 1, the last for +Inf)
        var sums: [Double]      // labels
        var mailEvents: [String: Int64] = [:]   // "backend/outcome"
    }

    private let labels: [String]
    private let labelIndex: [String: Int]
    private let state: Mutex<State>

    /// `labels`: every endpoint label the router gives; anything else counts as the last.
    public init(labels: [String]) {
        self.labels = labels
        var index: [String: Int] = [:]
        for (position, label) in labels.enumerated() { index[label] = position }
        labelIndex = index
        let statusSlots = Self.statuses.count + 1
        let bucketSlots = Self.latencyBuckets.count + 1
        state = Mutex(State(counts: Array(repeating: 0, count: labels.count * statusSlots),
                            buckets: Array(repeating: 0, count: labels.count * bucketSlots),
                            sums: Array(repeating: 0, count: labels.count)))
    }

    public func record(label: String, status: Int, seconds: Double) {
        let endpoint = labelIndex[label] ?? labels.count - 1
        let statusSlot = Self.statuses.firstIndex(of: status) ?? Self.statuses.count
        let buckets = Self.latencyBuckets
        let bucketSlot = buckets.firstIndex { seconds <= $0 } ?? buckets.count
        state.withLock { state in
            state.counts[endpoint * (Self.statuses.count + 1) + statusSlot] += 1
            state.buckets[endpoint * (buckets.count + 1) + bucketSlot] += 1
            state.sums[endpoint] += seconds
        }
    }

    /// One backend event this thread handled (Graph: an item delivered, a duplicate, an
    /// item dropped and why), for `ens_mail_events_total`.
    public func countMailEvent(backend: String, outcome: String, _ amount: Int = 1) {
        guard amount > 0 else { return }
        state.withLock { $0.mailEvents[backend + "/" + outcome, default: 0] += Int64(amount) }
    }

    /// Adds this thread's counts to `values` as Prometheus series (cumulative buckets).
    public func add(into values: inout [String: Double]) {
        let snapshot = state.withLock { $0 }
        for (key, count) in snapshot.mailEvents {
            let parts = key.split(separator: "/", maxSplits: 1).map(String.init)
            values[MetricsText.key("ens_mail_events_total", [("backend", parts[0]), ("outcome", parts.count > 1 ? parts[1] : "")]),
                   default: 0] += Double(count)
        }
        let buckets = Self.latencyBuckets
        for (endpoint, label) in labels.enumerated() {
            var total: Int64 = 0
            for slot in 0...Self.statuses.count {
                let count = snapshot.counts[endpoint * (Self.statuses.count + 1) + slot]
                total += count
                guard count > 0 else { continue }
                let code = slot < Self.statuses.count ? String(Self.statuses[slot]) : "other"
                values[MetricsText.key("ens_http_requests_total", [("endpoint", label), ("code", code)]), default: 0] += Double(count)
            }
            guard total > 0 else { continue }
            var cumulative: Int64 = 0
            for slot in 0...buckets.count {
                cumulative += snapshot.buckets[endpoint * (buckets.count + 1) + slot]
                let le = slot < buckets.count ? MetricsText.format(buckets[slot]) : "+Inf"
                values[MetricsText.key("ens_http_request_duration_seconds_bucket", [("endpoint", label), ("le", le)]),
                       default: 0] += Double(cumulative)
            }
            values[MetricsText.key("ens_http_request_duration_seconds_sum", [("endpoint", label)]), default: 0] += snapshot.sums[endpoint]
            values[MetricsText.key("ens_http_request_duration_seconds_count", [("endpoint", label)]), default: 0] += Double(total)
        }
    }
}

extension MetricsRecorder {
    /// Sets, for every series the counters produce, this process's starting value (what
    /// its predecessor in the slot had written) plus the counters' current sum.
    public func publish(_ counters: [RequestCounters], baseline: [String: Double]) {
        var totals: [String: Double] = [:]
        for threadCounters in counters { threadCounters.add(into: &totals) }
        for (key, value) in totals { set(key, (baseline[key] ?? 0) + value) }
    }
}
