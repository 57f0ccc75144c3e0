public import Logging
public import MariaDB
internal import POSIX
public import ENSModel

/// Coalesces proofs of life, check-ins and callbacks that deliver nothing, and writes
/// them in batches.
///
/// Every /getsubscriptionstatus(v2) is a check-in, and every EWS StatusEvent a callback
/// that only says the subscription lives. Writing each one at once would cost a commit
/// (an fsync, and on Galera a certification round) per request, for a timestamp: check-in
/// times decide, days later, whether a device is reaped; a callback's time decides
/// whether the subscription counts as lost, after its heartbeat interval plus
/// subscription.grace_seconds. Responder threads note them here; one flusher thread per
/// process writes everything noted in the last second, one UPDATE per batch of up to
/// 512, and once more when the process stops. A process killed outright loses at most
/// the last second's notes: a device repeats its check-in at its next one; a
/// subscription whose heartbeat was lost looks lapsed before its next heartbeat comes
/// (the grace is shorter than the interval), so ens-cron wakes its devices and they
/// register again, as after any lost subscription (docs/exchange.md).
public final class LivenessRecorder: Sendable {
    /// A callback that delivered nothing, as the newest one a record had in this batch.
    struct HeardCallback: Sendable {
        var generation: Int64
        var at: Timestamp
        var watermark: String?

        /// The newer of two notes for one record: a later generation wins, then a later
        /// time. One without a watermark keeps the older note's of the same generation
        /// (EWS sends one with every notification, so that is rare).
        func merged(with other: HeardCallback) -> HeardCallback {
            let (older, newer) = (other.generation, other.at) > (generation, at) ? (self, other) : (other, self)
            guard newer.watermark == nil, newer.generation == older.generation else { return newer }
            return HeardCallback(generation: newer.generation, at: newer.at, watermark: older.watermark)
        }
    }

    /// Ids per shard: record and device ids are each shard's own.
    private struct Pending {
        var devices: [Int: Set<Int64>] = [:]
        var users: [Int: Set<Int64>] = [:]
        var callbacks: [Int: [Int64: HeardCallback]] = [:]

        mutating func merge(_ other: Pending) {
            devices.merge(other.devices) { $0.union($1) }
            users.merge(other.users) { $0.union($1) }
            callbacks.merge(other.callbacks) { $0.merging($1) { $0.merged(with: $1) } }
        }
    }

    private let pending = SynchronizedBox(Pending())
    private let stopping = SynchronizedBox(false)
    private let intervalMilliseconds: Int

    public init(intervalMilliseconds: Int = 1000) {
        self.intervalMilliseconds = intervalMilliseconds
    }

    /// Notes that a device checked in (v2).
    public func device(_ id: Int64, shard: Int = 0) {
        pending.withLock { _ = $0.devices[shard, default: []].insert(id) }
    }

    /// Notes that a user checked in (v1): the record and its devices without a secret,
    /// if it has any (`SubscriptionStore.checkIn(recordID:now:)`).
    public func user(_ recordID: Int64, shard: Int = 0) {
        pending.withLock { _ = $0.users[shard, default: []].insert(recordID) }
    }

    /// Notes a callback for `recordID` at `generation` that delivered nothing, received
    /// at `at`, with the newest watermark it carried. Written as the record's
    /// last_callback_at and watermark, unless the record has since moved to another
    /// generation or recorded a later callback itself.
    public func callback(recordID: Int64, generation: Int64, watermark: String?, at: Timestamp, shard: Int = 0) {
        let heard = HeardCallback(generation: generation, at: at, watermark: watermark)
        pending.withLock { state in
            state.callbacks[shard, default: [:]][recordID] = state.callbacks[shard]?[recordID].map { $0.merged(with: heard) } ?? heard
        }
    }

    /// Writes what is pending (one database: shard 0 alone). Returns how many ids were written.
    @discardableResult
    public func flush(database: any SQLDatabase, now: Timestamp = .now()) throws(DatabaseError) -> Int {
        try flush(shards: { _ in database }, now: now)
    }

    /// Writes what is pending, each shard's ids to `shards(shard)`. What a shard could
    /// not take stays pending (the database may be restarting); the first failure is
    /// thrown once every shard was tried.
    @discardableResult
    public func flush(shards: (Int) -> any SQLDatabase, now: Timestamp = .now()) throws(DatabaseError) -> Int {
        let batch = pending.withLock { state -> Pending in
            let taken = state
            state = Pending()
            return taken
        }
        let time = now.databaseString
        var written = 0
        var firstError: DatabaseError?
        for shard in Set(batch.devices.keys).union(batch.users.keys).union(batch.callbacks.keys).sorted() {
            let devices = batch.devices[shard] ?? []
            let users = batch.users[shard] ?? []
            let callbacks = batch.callbacks[shard] ?? [:]
            let database = shards(shard)
            do {
                for chunk in Array(devices).chunked(Self.batchLimit) {
                    let ids = Self.padded(Array(chunk), with: chunk[chunk.startIndex])
                    try database.execute("UPDATE Devices SET last_checkin_at = \(time) WHERE id IN (\(list: ids))")
                }
                for chunk in Array(users).chunked(Self.batchLimit) {
                    let ids = Self.padded(Array(chunk), with: chunk[chunk.startIndex])
                    try database.execute("""
                        UPDATE EnsSubscriptionInfo s JOIN Devices d ON d.subscription_row = s.id AND d.secret_hash IS NULL
                        SET s.last_checkin_at = \(time), d.last_checkin_at = \(time) WHERE s.id IN (\(list: ids))
                        """)
                }
                for chunk in Array(callbacks).chunked(Self.batchLimit) {
                    try Self.writeCallbacks(chunk, to: database)
                }
                written += devices.count + users.count + callbacks.count
            } catch {
                // Kept for the next flush, merged with what arrived meanwhile. (Written
                // chunks are written again: each write only moves a record forward.)
                pending.withLock { $0.merge(Pending(devices: [shard: devices], users: [shard: users], callbacks: [shard: callbacks])) }
                firstError = firstError ?? error
            }
        }
        if let firstError { throw firstError }
        return written
    }

    /// One UPDATE for a batch of callbacks: each record at its noted generation whose
    /// last_callback_at is not later than the note (a callback that delivered mail
    /// records itself at once, with its watermark, and must not be moved back; nor must
    /// another host's later heartbeat on a cluster).
    private static func writeCallbacks(_ batch: ArraySlice<(key: Int64, value: HeardCallback)>, to database: any SQLDatabase) throws(DatabaseError) {
        let rows = padded(
            batch.map { [SQLValue.int($0.key), .int($0.value.generation), .text($0.value.at.databaseString), $0.value.watermark.sqlValue] },
            with: [.int(0), .int(0), .null, .null])
        // The first, typed row (id 0 is no record, nor is a padding row) gives the
        // constructed table its column types; parameters alone would give it none.
        try database.execute("""
            UPDATE EnsSubscriptionInfo s JOIN (
                WITH heard (id, generation, at, watermark) AS (
                    VALUES (0, 0, CAST(NULL AS DATETIME(3)), CAST(NULL AS CHAR(1024) CHARACTER SET ascii)), \(rows: rows))
                SELECT * FROM heard) heard ON s.id = heard.id AND s.generation = heard.generation
            SET s.last_callback_at = heard.at, s.watermark = COALESCE(heard.watermark, s.watermark)
            WHERE s.last_callback_at IS NULL OR s.last_callback_at <= heard.at
            """)
    }

    /// Ids or rows one statement carries at most.
    static let batchLimit = 512

    /// `items` padded with `filler` to the next power of two: a batch of any size is one
    /// of ten statement shapes, each a prepared statement its connection keeps (and the
    /// server counts against max_prepared_stmt_count, for all its clients together), not
    /// one of 512. The filler changes nothing: a repeated id, or a row of no record.
    static func padded<Item>(_ items: [Item], with filler: Item) -> [Item] {
        precondition(!items.isEmpty && items.count <= batchLimit, "a batch holds 1 to \(batchLimit) items")
        let size = items.count == 1 ? 1 : 1 << (Int.bitWidth - (items.count - 1).leadingZeroBitCount)
        return items + Array(repeating: filler, count: size - items.count)
    }

    /// Runs the flusher until `stop()`; then flushes one last time.
    public func run(shards: ShardConnections, logger: Logger) {
        while !stopping.withLock({ $0 }) {
            sleepMilliseconds(intervalMilliseconds)
            do {
                try flush(shards: shards.database(shard:))
            } catch {
                logger.warning("check-ins and heartbeats not written yet; will retry", metadata: ["db.error": "\(error)"])
            }
        }
        _ = try? flush(shards: shards.database(shard:))
    }

    public func stop() {
        stopping.withLock { $0 = true }
    }
}

extension Array {
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
