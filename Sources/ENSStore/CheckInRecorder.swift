public import Logging
public import MariaDB
internal import POSIX
public import ENSModel

/// Coalesces check-in timestamps and writes them in batches.
///
/// Every /getsubscriptionstatus(v2) is a check-in. Writing each one at once would cost a
/// commit (an fsync) per request; check-in times only decide, days later, whether a
/// device is reaped, so second-level precision is plenty. Responder threads note check-ins
/// here; one flusher thread per process writes everything noted in the last second with
/// one UPDATE per batch of ids. A crash loses at most the last second of check-ins, which
/// the devices repeat at their next check-in anyway.
public final class CheckInRecorder: Sendable {
    /// Ids per shard: record and device ids are each shard's own.
    private struct Pending {
        var devices: [Int: Set<Int64>] = [:]
        var users: [Int: Set<Int64>] = [:]

        mutating func merge(_ other: Pending) {
            devices.merge(other.devices) { $0.union($1) }
            users.merge(other.users) { $0.union($1) }
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

    /// Notes that a user checked in (v1): the record and all its devices.
    public func user(_ recordID: Int64, shard: Int = 0) {
        pending.withLock { _ = $0.users[shard, default: []].insert(recordID) }
    }

    /// Writes what is pending (one database: shard 0 alone). Returns how many ids were written.
    @discardableResult
    public func flush(database: any SQLDatabase, now: Timestamp = .now()) throws -> Int {
        try flush(shards: { _ in database }, now: now)
    }

    /// Writes what is pending, each shard's ids to `shards(shard)`. What a shard could
    /// not take stays pending (the database may be restarting); the first failure is
    /// thrown once every shard was tried.
    @discardableResult
    public func flush(shards: (Int) -> any SQLDatabase, now: Timestamp = .now()) throws -> Int {
        let batch = pending.withLock { state -> Pending in
            let taken = state
            state = Pending()
            return taken
        }
        let time = now.databaseString
        var written = 0
        var firstError: (any Error)?
        for shard in Set(batch.devices.keys).union(batch.users.keys).sorted() {
            let devices = batch.devices[shard] ?? []
            let users = batch.users[shard] ?? []
            let database = shards(shard)
            do {
                for chunk in Array(devices).chunked(500) {
                    try database.execute("UPDATE Devices SET last_checkin_at = \(time) WHERE id IN (\(list: chunk))")
                }
                for chunk in Array(users).chunked(500) {
                    try database.execute("""
                        UPDATE EnsSubscriptionInfo s LEFT JOIN Devices d ON d.subscription_row = s.id AND d.secret_hash IS NULL
                        SET s.last_checkin_at = \(time), d.last_checkin_at = \(time) WHERE s.id IN (\(list: chunk))
                        """)
                }
                written += devices.count + users.count
            } catch {
                pending.withLock { $0.merge(Pending(devices: [shard: devices], users: [shard: users])) }
                firstError = firstError ?? error
            }
        }
        if let firstError { throw firstError }
        return written
    }

    /// Runs the flusher until `stop()`; then flushes one last time.
    public func run(shards: ShardConnections, logger: Logger) {
        while !stopping.withLock({ $0 }) {
            sleepMilliseconds(intervalMilliseconds)
            do {
                try flush(shards: shards.database(shard:))
            } catch {
                logger.warning("check-ins not written yet; will retry", metadata: ["db.error": "\(error)"])
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
