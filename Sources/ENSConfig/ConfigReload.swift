public import Logging

/// What SIGHUP (`systemctl reload`) does with a changed config file. A reload must never
/// take the service down: a file that no longer parses is reported and the running
/// configuration kept. What is safe to change in a running process is applied (the log
/// level, and in the responders the callback, proof and quota limits); every other
/// changed key is named as needing a restart, so an operator is never left guessing. (The API-token cache needs no reload: every process re-reads it
/// within auth.refresh_seconds of `ens-cron apikeys` rewriting it.)
public struct ConfigReload: Sendable, Equatable {
    /// Keys every running process takes over from a reload (declared
    /// `reload: .everyProcess`).
    public static let appliedKeys: Set<String> = ConfigSchema.names(reloading: .everyProcess)

    /// Keys the responders (ens-fcgi) also take over (declared `reload: .responders`;
    /// `ENSConfiguration.reloading(_:from:)` applies them).
    public static let responderKeys: Set<String> = ConfigSchema.names(reloading: .responders)

    /// Changed keys the reload applied.
    public var applied: [String]
    /// Changed keys that take effect only after a restart.
    public var needRestart: [String]

    /// Compares the file the process runs with against the one on disk now; `alsoApplied`
    /// are the keys this kind of process takes over besides `appliedKeys`.
    public init(running: ConfigFile, reloaded: ConfigFile, alsoApplied: Set<String> = []) {
        let keys = Set(running.values.keys).union(reloaded.values.keys)
        let changed = keys.filter { running.values[$0] != reloaded.values[$0] }.sorted()
        let applies = Self.appliedKeys.union(alsoApplied)
        applied = changed.filter { applies.contains($0) }
        needRestart = changed.filter { !applies.contains($0) }
    }

    /// Re-reads `path` and applies the log level, saying in one log line what was applied
    /// and what needs a restart; returns the new configuration for the caller to take
    /// `alsoApplied` from, nil when the file has an error.
    @discardableResult
    public static func perform(path: String, running: ConfigFile, logger: Logger, alsoApplied: Set<String> = []) -> ENSConfiguration? {
        let fresh: ENSConfiguration
        do {
            fresh = try ENSConfiguration.load(path: path)
        } catch {
            logger.error("configuration not reloaded: the file has an error; the running configuration is kept", metadata: ["error": "\(error)"])
            return nil
        }
        LogfmtLogHandler.setLevel(Logger.Level(rawValue: fresh.logging.level) ?? .info)
        let reload = ConfigReload(running: running, reloaded: fresh.file, alsoApplied: alsoApplied)
        if reload.needRestart.isEmpty {
            logger.notice("configuration reloaded", metadata: ["applied": "\(reload.applied.joined(separator: ","))"])
        } else {
            logger.warning("configuration reloaded; some changes take effect only after a restart", metadata: [
                "applied": "\(reload.applied.joined(separator: ","))", "restart_needed": "\(reload.needRestart.joined(separator: ","))",
            ])
        }
        return fresh
    }
}
