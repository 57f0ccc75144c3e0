public import MariaDB

/// The counts `ens-cron status` shows besides `SubscriptionHealth`'s groups and the
/// `SenderHost` rows and `KeyPool.count`: devices by app and state, API tokens. Counts only:
/// no row of a user is read.
public enum StatusCounts {
    public struct DeviceCount: Sendable, Equatable {
        public let app: String
        public let enabled: Bool
        public let count: Int
    }

    public static func devices(database: any SQLDatabase) throws(DatabaseError) -> [DeviceCount] {
        try database.query("""
            SELECT bundle_id, disabled_at IS NULL, COUNT(*) FROM Devices GROUP BY bundle_id, disabled_at IS NULL
            """).map { row throws(DatabaseError) in
            let (app, enabled, count) = try row.decode(String.self, Int.self, Int.self)
            return DeviceCount(app: app, enabled: enabled == 1, count: count)
        }
    }

    public static func apiTokens(database: any SQLDatabase) throws(DatabaseError) -> (active: Int, revoked: Int) {
        var counts = (active: 0, revoked: 0)
        for row in try database.query("SELECT revoked_at IS NULL, COUNT(*) FROM APITokens GROUP BY revoked_at IS NULL") {
            let (active, count) = try row.decode(Int.self, Int.self)
            if active == 1 { counts.active = count } else { counts.revoked = count }
        }
        return counts
    }
}
