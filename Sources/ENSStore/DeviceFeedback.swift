public import MariaDB
public import ENSModel

/// Writes what APNs said about devices back to MariaDB: when a device was last notified,
/// and that a token is dead. A token is disabled only if it was not registered again
/// after APNs declared it invalid (Apple's 410 timestamp; the SNS rule).
///
/// Deliveries are recorded in batches: one UPDATE per `flushInterval` (or per
/// `maximumBatch` rows) instead of one committed write per notification, which would
/// tie the delivery loop to MariaDB's commit latency. A batch carries the time of its
/// newest delivery; the recorded time is at most one interval late. Used by the
/// delivery thread only.
public final class DeviceFeedback {
    public let database: any SQLDatabase
    private var deliveredRows: Set<Int64> = []
    private var newestDelivery: Timestamp?
    private var lastFlush: Int64 = 0

    static let flushIntervalMilliseconds: Int64 = 250
    static let maximumBatch = 500

    public init(database: any SQLDatabase) {
        self.database = database
    }

    /// Notes a delivery; written by the next `flush`.
    public func delivered(deviceRowID: Int64, at time: Timestamp) {
        deliveredRows.insert(deviceRowID)
        if newestDelivery.map({ time > $0 }) ?? true { newestDelivery = time }
    }

    /// Writes noted deliveries when the interval has passed, the batch is full, or
    /// `force` (at shutdown). Rows stay noted if the write fails, for the next try.
    public func flush(nowMilliseconds: Int64, force: Bool = false) throws(DatabaseError) {
        guard !deliveredRows.isEmpty, let time = newestDelivery else { return }
        guard force || deliveredRows.count >= Self.maximumBatch || nowMilliseconds - lastFlush >= Self.flushIntervalMilliseconds else { return }
        lastFlush = nowMilliseconds
        let rows = Array(deliveredRows)
        try database.execute("UPDATE Devices SET last_notified_at = \(time.databaseString) WHERE id IN (\(list: rows))")
        deliveredRows.removeAll(keepingCapacity: true)
        newestDelivery = nil
    }

    public func disable(deviceRowID: Int64, invalidSince: Timestamp) throws(DatabaseError) {
        let since = invalidSince.databaseString
        try database.execute("""
            UPDATE Devices SET disabled_at = \(since)
            WHERE id = \(deviceRowID) AND disabled_at IS NULL AND registered_at <= \(since)
            """)
    }
}

/// The delivery thread's feedback for every shard: each push names its device's shard
/// (`PushNotification.shard`; none: shard 0), whose Devices table the feedback is for.
/// A shard's connection opens with its first feedback.
public final class ShardedDeviceFeedback {
    private let connections: ShardConnections
    private var byShard: [Int: DeviceFeedback] = [:]

    public init(_ shards: ShardDatabases) {
        connections = ShardConnections(shards)
    }

    /// Nil for a shard the map no longer has (a push spooled before the map changed):
    /// its feedback has nowhere to go, and the push is delivered all the same.
    public func shard(_ shard: Int?) -> DeviceFeedback? {
        let number = shard ?? 0
        if let feedback = byShard[number] { return feedback }
        guard connections.shards.contains(shard: number) else { return nil }
        let feedback = DeviceFeedback(database: connections.database(shard: number))
        byShard[number] = feedback
        return feedback
    }

    /// Flushes every shard's feedback; one shard's failure does not hold the others back
    /// (its rows stay noted), and the first is thrown after all were tried.
    public func flush(nowMilliseconds: Int64, force: Bool = false) throws(DatabaseError) {
        var firstError: DatabaseError?
        for number in byShard.keys.sorted() {
            do {
                try byShard[number]?.flush(nowMilliseconds: nowMilliseconds, force: force)
            } catch {
                firstError = firstError ?? error
            }
        }
        if let firstError { throw firstError }
    }
}
