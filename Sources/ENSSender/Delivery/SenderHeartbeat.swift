internal import ENSModel
public import ENSStore
public import Logging
internal import POSIX
import Synchronization

/// Writes this host's row in SenderHosts every few seconds: its spool depth and oldest
/// waiting notification, so `ens-cron status` on any host sees a sender that stopped
/// with notifications in its spool. Runs on a thread and a database connection of its
/// own: a slow or absent database never holds up delivery. An outage is logged once
/// (and its end once); the next beat simply tries again.
public final class SenderHeartbeat: Sendable {
    public static let interval: Duration = .seconds(5)

    private let host: String
    private let spool: Spool
    private let database: DatabaseSettings
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)

    public init(host: String, spool: Spool, database: DatabaseSettings, logger: Logger) {
        self.host = host
        self.spool = spool
        self.database = database
        self.logger = logger
    }

    /// Makes `run` write its last row and return (call once delivery has stopped, so the
    /// row holds what is left after it drained).
    public func stop() {
        stopping.store(true, ordering: .releasing)
    }

    /// Beats until `stop()`, then writes a final row; run it on a thread of its own.
    public func run() {
        let connection = Databases.connection(database)
        var failing = false
        while true {
            let last = stopping.load(ordering: .acquiring)
            let row = SenderHost(host: host, spoolEntries: spool.count, oldestEntryAt: spool.oldestWaitingSince, heartbeatAt: .now())
            do {
                try row.write(database: connection)
                if failing { logger.notice("sender heartbeat written again", metadata: ["host": "\(host)"]) }
                failing = false
            } catch {
                if !failing { logger.warning("cannot write the sender heartbeat; retrying", metadata: ["host": "\(host)", "db.error": "\(error)"]) }
                failing = true
            }
            if last { return }
            // In steps, so that a stop is answered within a tenth of a second.
            let wake = MonotonicClock.milliseconds() + UInt64(Self.interval.wholeMilliseconds)
            while MonotonicClock.milliseconds() < wake && !stopping.load(ordering: .acquiring) { sleepMilliseconds(100) }
        }
    }
}
