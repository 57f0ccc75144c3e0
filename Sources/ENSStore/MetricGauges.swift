public import MariaDB
internal import ENSMetrics
public import ENSModel

/// The database gauges of GET /metrics (subscriptions and devices by state), counted by
/// `ens-cron gauges` once a minute and kept in MetricGauges, one row per series.
///
/// /metrics used to run these counts, whole-table scans, on every scrape and every host,
/// as often as anyone who reached the endpoint liked. Now a scrape reads a handful of
/// rows by primary key, and the counts are as old as the last cron run
/// (`ens_gauges_counted_at_seconds` says when; at most a minute or two when cron runs).
public enum MetricGauges {
    /// Every series the count writes, so a state with nothing in it reads 0 (not absent).
    static let states: [(family: String, state: String)] = [
        ("ens_subscriptions", "healthy"), ("ens_subscriptions", "stale"), ("ens_subscriptions", "unregistered"),
        ("ens_devices", "enabled"), ("ens_devices", "disabled"),
    ]
    /// When the counts were made, in seconds since the epoch (0: never).
    public static let countedAtKey = "ens_gauges_counted_at_seconds"

    /// Counts records by subscription state (healthy: heard from within the heartbeat
    /// plus `grace`; stale: registered but silent; unregistered) and devices by state.
    public static func count(database: any SQLDatabase, grace: Duration, now: Timestamp) throws(DatabaseError) -> [String: Int64] {
        var values: [String: Int64] = [:]
        for (family, state) in states { values[MetricsText.key(family, [("state", state)])] = 0 }
        for group in try SubscriptionHealth.groups(database: database, grace: grace, now: now) {
            values[MetricsText.key("ens_subscriptions", [("state", group.state)]), default: 0] += Int64(group.count)
        }
        // disabled_at is indexed (ix_device_disabled): the disabled count reads the index.
        let total: Int64 = try database.queryOne("SELECT COUNT(*) FROM Devices")?.int(0) ?? 0
        let disabled: Int64 = try database.queryOne("SELECT COUNT(*) FROM Devices WHERE disabled_at IS NOT NULL")?.int(0) ?? 0
        values[MetricsText.key("ens_devices", [("state", "disabled")])] = disabled
        values[MetricsText.key("ens_devices", [("state", "enabled")])] = max(0, total - disabled)
        return values
    }

    /// Counts and stores them, in one transaction (a scrape never sees half a count).
    @discardableResult
    public static func refresh(database: any SQLDatabase, grace: Duration, now: Timestamp) throws(DatabaseError) -> [String: Int64] {
        try refresh(counting: [database], into: database, grace: grace, now: now)
    }

    /// Counts every shard's records and devices, and stores the sums in shard 0
    /// (`global`), whose rows /metrics reads.
    @discardableResult
    public static func refresh(counting shards: [any SQLDatabase], into database: any SQLDatabase,
                               grace: Duration, now: Timestamp) throws(DatabaseError) -> [String: Int64] {
        var values: [String: Int64] = [:]
        for shard in shards {
            values.merge(try count(database: shard, grace: grace, now: now), uniquingKeysWith: +)
        }
        try database.atomically { () throws(DatabaseError) in
            for (series, value) in values {
                try database.execute("""
                    INSERT INTO MetricGauges (series, value, counted_at) VALUES (\(series), \(value), \(now.databaseString))
                    ON DUPLICATE KEY UPDATE value = VALUES(value), counted_at = VALUES(counted_at)
                    """)
            }
        }
        return values
    }

    /// What the last count stored, with `ens_gauges_counted_at_seconds`; every series at
    /// 0 (and the time 0) before the first count.
    public static func stored(database: any SQLDatabase) throws(DatabaseError) -> [String: Double] {
        var values: [String: Double] = [countedAtKey: 0]
        for (family, state) in states { values[MetricsText.key(family, [("state", state)])] = 0 }
        var countedAt: Timestamp?
        for row in try database.query("SELECT series, value, counted_at FROM MetricGauges") {
            let (series, value, at) = try row.decode(String.self, Int64.self, Timestamp.self)
            guard values[series] != nil else { continue }  // a series this version no longer reports
            values[series] = Double(value)
            countedAt = [countedAt, at].compactMap { $0 }.min()
        }
        if let countedAt { values[countedAtKey] = Double(countedAt.millisecondsSinceEpoch) / 1000 }
        return values
    }
}
