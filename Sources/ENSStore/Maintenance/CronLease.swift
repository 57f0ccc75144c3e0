public import MariaDB
internal import OpenSSL
internal import POSIX
public import ENSModel

/// The lease that lets one `ens-cron` at a time, across every host of a cluster, run
/// the shared jobs (table CronLeases, migration 008), so that every host can keep the
/// same cron.d.
///
/// A lock would not do: GET_LOCK and SELECT … FOR UPDATE only exclude sessions on one
/// Galera node. The lease is claimed by writing its row, with an UPDATE that matches
/// only a free or expired lease; of two hosts that claim at once, one UPDATE finds the
/// row taken, or loses certification at COMMIT and, run again, finds it taken. A holder
/// that crashes stops renewing, and the lease is free once `expires_at` passes. The
/// database's clock decides expiry, so hosts' clocks need not agree.
public struct CronLease: Sendable {
    /// Who holds it, for the operator: host name and process id.
    public let holder: String
    public let name: String
    /// How long a claim or a renewal lasts.
    public let duration: Duration
    /// Random per claim: renewal and release match on it, so a holder that stalled past
    /// its expiry can neither extend nor free the lease someone else has since claimed.
    private let token: [UInt8]

    /// The lease held by someone else, as the row says (for the skip's log line).
    public struct Held: Sendable {
        public let holder: String
        public let expiresAt: Timestamp?
    }

    public enum Outcome: Sendable {
        case claimed(CronLease)
        case heldElsewhere(Held)
    }

    /// Claims the lease `name` if it is free or expired.
    public static func claim(_ name: String, holder: String, duration: Duration, database: any SQLDatabase) throws(DatabaseError) -> Outcome {
        let token = randomBytes(16)
        // The row exists from the first claim on; INSERT IGNORE makes it without a
        // separate setup step (two first claims at once: one insert wins, both UPDATEs
        // then compete as usual).
        try database.execute("INSERT IGNORE INTO CronLeases (name) VALUES (\(name))")
        let seconds = duration.components.seconds
        let claimed = try database.execute("""
            UPDATE CronLeases SET holder = \(holder), token = \(token), expires_at = NOW(3) + INTERVAL \(seconds) SECOND
            WHERE name = \(name) AND (token IS NULL OR expires_at < NOW(3))
            """).affectedRows == 1
        if claimed {
            return .claimed(CronLease(holder: holder, name: name, duration: duration, token: token))
        }
        let row = try database.queryOne("SELECT holder, expires_at FROM CronLeases WHERE name = \(name)")
        let (current, expiresAt) = try row?.decode(String?.self, Timestamp?.self) ?? (nil, nil)
        return .heldElsewhere(Held(holder: current ?? "unknown", expiresAt: expiresAt))
    }

    /// Extends the lease by `duration` from now. False when it is no longer this
    /// holder's (it expired and someone else claimed it).
    public func renew(database: any SQLDatabase) throws(DatabaseError) -> Bool {
        if try database.execute("""
            UPDATE CronLeases SET expires_at = NOW(3) + INTERVAL \(duration.components.seconds) SECOND
            WHERE name = \(name) AND token = \(token)
            """).affectedRows == 1 {
            return true
        }
        // No row changed: someone else holds it now, or the new expiry equals the old
        // one (renewed within the millisecond of the claim), which MariaDB does not count.
        return try database.queryOne("SELECT 1 FROM CronLeases WHERE name = \(name) AND token = \(token)") != nil
    }

    /// Frees the lease for the next run, if it is still this holder's.
    public func release(database: any SQLDatabase) throws(DatabaseError) {
        try database.execute("UPDATE CronLeases SET holder = NULL, token = NULL, expires_at = NULL WHERE name = \(name) AND token = \(token)")
    }
}

/// Renews a lease on a thread of its own (with its own connection: a `Connection` serves
/// one thread) while the jobs run, every third of its duration, so a long reap keeps
/// it and a crashed holder loses it within one duration.
public final class CronLeaseKeeper: Sendable {
    private let stopped = SynchronizedBox(false)
    private let lost = SynchronizedBox(false)
    private let thread: OSThread

    /// `onLost` runs once, on the keeper's thread, if a renewal finds the lease gone.
    public init(lease: CronLease, database: MariaDBConfiguration, onLost: @escaping @Sendable () -> Void,
                onError: @escaping @Sendable (any Error) -> Void) throws {
        let stopped = self.stopped
        let lost = self.lost
        let interval = max(1, lease.duration.components.seconds * 1000 / 3)
        thread = try OSThread.start { [stopped, lost] in
            let connection = Connection(configuration: database)
            var sinceRenewal: Int64 = 0
            while !stopped.withLock({ $0 }) {
                sleepMilliseconds(200)
                sinceRenewal += 200
                guard sinceRenewal >= interval else { continue }
                sinceRenewal = 0
                do {
                    if try !lease.renew(database: connection) {
                        lost.withLock { $0 = true }
                        onLost()
                        return
                    }
                } catch {
                    // The database is away: the next renewal tries again, and the lease
                    // lasts a whole duration, so a short outage costs nothing.
                    onError(error)
                }
            }
        }
    }

    /// Whether a renewal found the lease taken by someone else.
    public var leaseLost: Bool { lost.withLock { $0 } }

    /// Stops renewing (before the lease is released).
    public func stop() {
        stopped.withLock { $0 = true }
        thread.join()
    }
}
