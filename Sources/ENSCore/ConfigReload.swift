public import Logging

/// What SIGHUP (`systemctl reload`) does with a changed config file. A reload must never
/// take the service down: a file that no longer parses is reported and the running
/// configuration kept. What is safe to change in a running process is applied (the log
/// level); every other changed key is named as needing a restart, so an operator is
/// never left guessing. (The API-token cache needs no reload: every process re-reads it
/// within auth.refresh_seconds of `ens-cron apikeys` rewriting it.)
public struct ConfigReload: Sendable, Equatable {
    /// Keys a running process takes over from a reload.
    public static let appliedKeys: Set<String> = ["log.level"]

    /// Changed keys the reload applied.
    public var applied: [String]
    /// Changed keys that take effect only after a restart.
    public var needRestart: [String]

    /// Compares the file the process runs with against the one on disk now.
    public init(running: ConfigFile, reloaded: ConfigFile) {
        let keys = Set(running.values.keys).union(reloaded.values.keys)
        let changed = keys.filter { running.values[$0] != reloaded.values[$0] }.sorted()
        applied = changed.filter { Self.appliedKeys.contains($0) }
        needRestart = changed.filter { !Self.appliedKeys.contains($0) }
    }

    /// Re-reads `path` and applies what it can, saying what it did in one log line.
    public static func perform(path: String, running: ConfigFile, logger: Logger) {
        let fresh: ENSConfiguration
        do {
            fresh = try ENSConfiguration.load(path: path)
        } catch {
            logger.error("configuration not reloaded: the file has an error; the running configuration is kept", metadata: ["error": "\(error)"])
            return
        }
        LogfmtLogHandler.setLevel(Logger.Level(rawValue: fresh.logLevel) ?? .info)
        let reload = ConfigReload(running: running, reloaded: fresh.file)
        if reload.needRestart.isEmpty {
            logger.notice("configuration reloaded", metadata: ["applied": "\(reload.applied.joined(separator: ","))"])
        } else {
            logger.warning("configuration reloaded; some changes take effect only after a restart", metadata: [
                "applied": "\(reload.applied.joined(separator: ","))", "restart_needed": "\(reload.needRestart.joined(separator: ","))",
            ])
        }
    }
}
