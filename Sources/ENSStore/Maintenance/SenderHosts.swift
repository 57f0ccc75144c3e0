public import MariaDB
internal import Logging
public import ENSModel

/// One host's sender (ens-sender) as its heartbeat row in SenderHosts says: how much its
/// spool holds and when it last wrote. Several hosts share the database, each with its
/// own spool; a host whose heartbeat stopped while its spool held notifications is lost
/// until another host drains that spool (`ens-sender drain`).
public struct SenderHost: Sendable, Equatable {
    public var host: String
    public var spoolEntries: Int
    /// When the oldest segment still holding a notification was last written.
    public var oldestEntryAt: Timestamp?
    public var heartbeatAt: Timestamp
    /// The release its sender runs (`Release.version`); nil for a release before 0.2.0.
    public var release: String?

    /// A running sender writes every `SenderHeartbeat` interval (5 s); twelve missed
    /// beats leave no doubt.
    public static let lostAfter: Duration = .seconds(60)

    public init(host: String, spoolEntries: Int, oldestEntryAt: Timestamp?, heartbeatAt: Timestamp, release: String? = Release.version) {
        self.host = host
        self.spoolEntries = spoolEntries
        self.oldestEntryAt = oldestEntryAt
        self.heartbeatAt = heartbeatAt
        self.release = release
    }

    /// Stopped writing while notifications wait in its spool.
    public func isLost(now: Timestamp) -> Bool {
        spoolEntries > 0 && isSilent(now: now)
    }

    /// No heartbeat for `lostAfter`: its sender is not running (or cannot reach the database).
    public func isSilent(now: Timestamp) -> Bool {
        heartbeatAt < now.subtracting(Self.lostAfter)
    }

    /// What the operator is told to run for a lost host, on the host that takes over.
    public var drainCommand: String {
        "ens-sender drain --from <copy of \(host)'s push.spool_dir> --host \(host)"
    }

    // MARK: The table

    /// Every host's row, by name.
    public static func all(database: any SQLDatabase) throws(DatabaseError) -> [SenderHost] {
        try database.query("SELECT host, spool_entries, oldest_entry_at, heartbeat_at, release_version FROM SenderHosts ORDER BY host")
            .map { row throws(DatabaseError) in
                let (host, entries, oldest, heartbeat, release) = try row.decode(String.self, Int.self, Timestamp?.self, Timestamp.self, String?.self)
                return SenderHost(host: host, spoolEntries: entries, oldestEntryAt: oldest, heartbeatAt: heartbeat, release: release)
            }
    }

    /// Writes this host's row (a heartbeat).
    public func write(database: any SQLDatabase) throws(DatabaseError) {
        try database.execute("""
            INSERT INTO SenderHosts (host, spool_entries, oldest_entry_at, heartbeat_at, release_version)
            VALUES (\(host), \(spoolEntries), \(oldestEntryAt?.databaseString), \(heartbeatAt.databaseString), \(release))
            ON DUPLICATE KEY UPDATE spool_entries = VALUES(spool_entries), oldest_entry_at = VALUES(oldest_entry_at),
              heartbeat_at = VALUES(heartbeat_at), release_version = VALUES(release_version)
            """)
    }

    /// Removes a lost host's row once its spool was drained elsewhere; a host that wrote
    /// within `lostAfter` is running again and keeps its row. True if a row went.
    public static func forget(_ host: String, database: any SQLDatabase, now: Timestamp) throws(DatabaseError) -> Bool {
        try database.execute("""
            DELETE FROM SenderHosts WHERE host = \(host) AND heartbeat_at < \(now.subtracting(lostAfter).databaseString)
            """).affectedRows > 0
    }
}

extension Maintenance {
    /// One warning per sender host lost with notifications in its spool (run with reap, so
    /// cron repeats it until someone drains that spool). Host names and counts only. A
    /// table that cannot be read is a warning too, never reap's failure.
    public func warnAboutLostSenders() {
        do {
            for host in try SenderHost.all(database: database) where host.isLost(now: now) {
                logger.warning("sender host lost with queued notifications", metadata: [
                    "host": "\(host.host)", "spool.entries": "\(host.spoolEntries)",
                    "heartbeat_at": "\(host.heartbeatAt.databaseString)", "drain": "\(host.drainCommand)",
                ])
            }
        } catch {
            logger.warning("cannot read SenderHosts", metadata: ["db.error": "\(error)"])
        }
    }
}
