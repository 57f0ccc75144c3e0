public import MariaDB
internal import POSIX
public import ENSModel

/// Whether subscriptions are being heard from, defined once for `/metrics` and
/// `ens-cron status`: healthy (heard from within the heartbeat, or a Graph
/// subscription's lifetime, plus the grace), stale (registered but silent), or
/// unregistered.
public enum SubscriptionHealth {
    public struct Group: Sendable {
        public let backend: String
        public let state: String
        public let count: Int
        /// The newest and oldest sign of life among the group's records.
        public let newest: Timestamp?
        public let oldest: Timestamp?
    }

    /// Records counted by backend and state.
    public static func groups(database: any SQLDatabase, grace: Duration, now: Timestamp) throws(DatabaseError) -> [Group] {
        try database.query("""
            SELECT mail_backend,
                   CASE WHEN registered = 0 OR subscription_id IS NULL THEN 'unregistered'
                        WHEN last_callback_at IS NOT NULL
                             AND last_callback_at + INTERVAL (heartbeat_minutes * 60 + \(grace.wholeSeconds)) SECOND >= \(now.databaseString)
                             THEN 'healthy'
                        ELSE 'stale' END AS state,
                   COUNT(*), MAX(last_callback_at), MIN(last_callback_at)
            FROM EnsSubscriptionInfo GROUP BY mail_backend, state
            """).map { row throws(DatabaseError) in
            let (backend, state, count, newest, oldest) = try row.decode(String.self, String.self, Int.self, Timestamp?.self, Timestamp?.self)
            return Group(backend: backend, state: state, count: count, newest: newest, oldest: oldest)
        }
    }
}
