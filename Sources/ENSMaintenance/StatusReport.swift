public import ENSConfig
public import ENSModel
public import ENSStore
internal import POSIX

/// What `ens-cron status` tells an operator: "how healthy is my ENS?" without SQL.
/// Counts only: no user id, address, token or URL is ever part of it.
public struct StatusReport: Sendable {
    public struct Subscriptions: Sendable, Equatable {
        public var backend: String
        public var healthy = 0
        public var stale = 0
        public var unregistered = 0
        /// The most recent sign of life from the backend (heartbeat, callback, renewal).
        public var lastHeardFrom: Timestamp?
        /// The longest-silent subscription that should have been heard from by now.
        public var oldestOverdueSince: Timestamp?
    }

    public struct Devices: Sendable, Equatable {
        public var app: String
        /// The push services the app has credentials for (a device's own provider is
        /// inside its sealed token): "apns", "fcm" or "apns+fcm", "none" when neither.
        public var provider: String
        public var enabled = 0
        public var disabled = 0
    }


    public var generatedAt: Timestamp
    public var subscriptions: [Subscriptions] = []
    public var devices: [Devices] = []
    /// The sender's durable queue, read from its files (no key needed).
    public var spool: SpoolContents?
    public var spoolProblem: String?
    /// Every host's sender as its heartbeat row says (several hosts, one database).
    public var senderHosts: [SenderHost] = []
    public var cronJobs: [CronJobLog.Entry] = []
    public var activeTokens = 0
    public var revokedTokens = 0
    public var keyPool = 0
    public var keyPoolTarget = 0

    /// The jobs `ens-cron all` runs, in its order (a job never run is listed as such).
    public static let jobs = ["api-keys", "reap", "renew", "sync-keys", "keys", "gauges"]

    /// Reads the database's side of the report.
    public static func gather(database: Database, configuration: ENSConfiguration, now: Timestamp) throws(DatabaseError) -> StatusReport {
        var report = StatusReport(generatedAt: now)
        var byBackend: [String: Subscriptions] = [:]
        for backend in MailBackend.allCases { byBackend[backend.rawValue] = Subscriptions(backend: backend.rawValue) }
        for group in try SubscriptionHealth.groups(database: database, grace: configuration.deviceAPI.subscriptionGrace, now: now) {
            var entry = byBackend[group.backend] ?? Subscriptions(backend: group.backend)
            switch group.state {
            case "healthy": entry.healthy += group.count
            case "stale":
                entry.stale += group.count
                entry.oldestOverdueSince = [entry.oldestOverdueSince, group.oldest].compactMap { $0 }.min()
            default: entry.unregistered += group.count
            }
            if group.state != "unregistered" {
                entry.lastHeardFrom = [entry.lastHeardFrom, group.newest].compactMap { $0 }.max()
            }
            byBackend[group.backend] = entry
        }
        report.subscriptions = byBackend.keys.sorted().compactMap { byBackend[$0] }

        var byApp: [String: Devices] = [:]
        for group in try StatusCounts.devices(database: database) {
            var entry = byApp[group.app] ?? Devices(app: group.app, provider: Self.pushCredentials(app: group.app, configuration))
            if group.enabled { entry.enabled += group.count } else { entry.disabled += group.count }
            byApp[group.app] = entry
        }
        report.devices = byApp.keys.sorted().compactMap { byApp[$0] }

        (report.activeTokens, report.revokedTokens) = try StatusCounts.apiTokens(database: database)
        report.keyPool = try KeyPool.count(database: database)
        report.senderHosts = try SenderHost.all(database: database)
        report.keyPoolTarget = configuration.secrets.keyPoolSize
        return report
    }

    static func pushCredentials(app: String, _ configuration: ENSConfiguration) -> String {
        let apns = configuration.apns.certificates[app] != nil || !configuration.apns.keyID.isEmpty
        let fcm = configuration.fcm.serviceAccountFiles[app] != nil
        return [apns ? "apns" : nil, fcm ? "fcm" : nil].compactMap { $0 }.joined(separator: "+").nonEmpty ?? "none"
    }

    // MARK: Rendering

    /// For a person: one section each, aligned columns, times in UTC with their age.
    public func text() -> String {
        var lines = ["ENS status at \(generatedAt.databaseString.prefix(19)) UTC (this ens-cron: release \(Release.version))", ""]
        lines.append("Subscriptions")
        lines += table(["backend", "healthy", "stale", "unregistered", "last heard from", "oldest overdue since"], subscriptions.map {
            [$0.backend, "\($0.healthy)", "\($0.stale)", "\($0.unregistered)", when($0.lastHeardFrom), when($0.oldestOverdueSince)]
        })
        lines.append("")
        lines.append("Devices")
        lines += devices.isEmpty ? ["  none"] : table(["app", "push credentials", "enabled", "disabled"], devices.map {
            [$0.app, $0.provider, "\($0.enabled)", "\($0.disabled)"]
        })
        lines.append("")
        lines.append("Spool (ens-sender)")
        if let spool {
            lines.append(
                "  \(spool.pending) notifications waiting in \(spool.segments) segment file(s); oldest waiting since \(when(spool.oldestWrittenAt))"
            )
        } else {
            lines.append("  unknown: \(spoolProblem ?? "not read")")
        }
        lines.append("")
        lines.append("Sender hosts (heartbeats in SenderHosts)")
        lines += senderHosts.isEmpty ? ["  none"] : table(["host", "release", "heartbeat", "spool entries", "oldest entry"], senderHosts.map {
            [$0.host, $0.release ?? "before 0.2.0", when($0.heartbeatAt), "\($0.spoolEntries)", when($0.oldestEntryAt)]
        })
        for host in senderHosts where host.isLost(now: generatedAt) {
            lines.append("  \(host.host): lost with \(host.spoolEntries) queued notifications: drain its spool with `\(host.drainCommand)`")
        }
        lines.append("")
        lines.append("Cron jobs")
        lines += table(["job", "last run", "outcome", "took"], Self.jobs.map { job in
            guard let entry = lastRun(of: job) else { return [job, "never (or not recorded)", "-", "-"] }
            return [job, when(entry.finishedAt), entry.outcome, "\(entry.took.wholeMilliseconds) ms"]
        })
        lines.append("")
        lines.append("API tokens: \(activeTokens) active, \(revokedTokens) revoked")
        lines.append("RSA key pool: \(keyPool) of \(keyPoolTarget)")
        return lines.joined(separator: "\n") + "\n"
    }

    /// For scripts: one JSON object; times in ISO 8601 UTC, absent ones null.
    public func json() -> [UInt8] {
        func time(_ value: Timestamp?) -> [UInt8] {
            guard let value else { return Array("null".utf8) }
            var bytes: [UInt8] = []
            JSONObjectWriter.appendString(value.isoString, to: &bytes)
            return bytes
        }
        func array(_ objects: [[UInt8]]) -> [UInt8] {
            [UInt8(ascii: "[")] + Array(objects.joined(separator: [UInt8(ascii: ",")])) + [UInt8(ascii: "]")]
        }
        var root = JSONObjectWriter()
        root.add("generatedAt", rawJSON: time(generatedAt))
        root.add("release", Release.version)
        root.add("subscriptions", rawJSON: array(subscriptions.map { entry in
            var object = JSONObjectWriter()
            object.add("backend", entry.backend)
            object.add("healthy", entry.healthy)
            object.add("stale", entry.stale)
            object.add("unregistered", entry.unregistered)
            object.add("lastHeardFrom", rawJSON: time(entry.lastHeardFrom))
            object.add("oldestOverdueSince", rawJSON: time(entry.oldestOverdueSince))
            return object.finished()
        }))
        root.add("devices", rawJSON: array(devices.map { entry in
            var object = JSONObjectWriter()
            object.add("app", entry.app)
            object.add("pushCredentials", entry.provider)
            object.add("enabled", entry.enabled)
            object.add("disabled", entry.disabled)
            return object.finished()
        }))
        if let spool {
            var object = JSONObjectWriter()
            object.add("pending", spool.pending)
            object.add("segments", spool.segments)
            object.add("oldestWaitingSince", rawJSON: time(spool.oldestWrittenAt))
            root.add("spool", rawJSON: object.finished())
        } else {
            root.add("spool", rawJSON: Array("null".utf8))
        }
        root.add("senderHosts", rawJSON: array(senderHosts.map { entry in
            var object = JSONObjectWriter()
            object.add("host", entry.host)
            object.add("heartbeatAt", rawJSON: time(entry.heartbeatAt))
            if let release = entry.release { object.add("release", release) } else { object.add("release", rawJSON: Array("null".utf8)) }
            object.add("heartbeatAgeSeconds", Int(max(0, (generatedAt.millisecondsSinceEpoch - entry.heartbeatAt.millisecondsSinceEpoch) / 1000)))
            object.add("spoolEntries", entry.spoolEntries)
            object.add("oldestEntryAt", rawJSON: time(entry.oldestEntryAt))
            let lost = entry.isLost(now: generatedAt)
            object.add("lost", rawJSON: Array((lost ? "true" : "false").utf8))
            if lost { object.add("drainCommand", entry.drainCommand) } else { object.add("drainCommand", rawJSON: Array("null".utf8)) }
            return object.finished()
        }))
        root.add("cronJobs", rawJSON: array(Self.jobs.map { job in
            var object = JSONObjectWriter()
            object.add("job", job)
            if let entry = lastRun(of: job) {
                object.add("lastRun", rawJSON: time(entry.finishedAt))
                object.add("outcome", entry.outcome)
                object.add("tookMilliseconds", entry.took.wholeMilliseconds)
            } else {
                object.add("lastRun", rawJSON: Array("null".utf8))
                object.add("outcome", rawJSON: Array("null".utf8))
            }
            return object.finished()
        }))
        var tokens = JSONObjectWriter()
        tokens.add("active", activeTokens)
        tokens.add("revoked", revokedTokens)
        root.add("apiTokens", rawJSON: tokens.finished())
        var pool = JSONObjectWriter()
        pool.add("keys", keyPool)
        pool.add("target", keyPoolTarget)
        root.add("keyPool", rawJSON: pool.finished())
        return root.finished() + [UInt8(ascii: "\n")]
    }

    private func lastRun(of job: String) -> CronJobLog.Entry? {
        cronJobs.first { $0.job == job }
    }

    private func when(_ time: Timestamp?) -> String {
        guard let time else { return "-" }
        let seconds = max(0, (generatedAt.millisecondsSinceEpoch - time.millisecondsSinceEpoch) / 1000)
        let age = seconds < 120 ? "\(seconds) s"
            : seconds < 7200 ? "\(seconds / 60) min"
            : seconds < 172_800 ? "\(seconds / 3600) h"
            : "\(seconds / 86400) d"
        return "\(time.databaseString.prefix(19)) (\(age) ago)"
    }

    private func table(_ header: [String], _ rows: [[String]]) -> [String] {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            "  " + row.indices.map { column in
                let cell = row[column]
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                // Numbers right-aligned, text left-aligned.
                return cell.allSatisfy(\.isNumber) && !cell.isEmpty ? padding + cell : cell + padding
            }.joined(separator: "  ").trimmingSuffixSpaces()
        }
    }
}

extension String {
    fileprivate var nonEmpty: String? { isEmpty ? nil : self }

    fileprivate func trimmingSuffixSpaces() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
