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
    private struct Pending {
        var devices: Set<Int64> = []
        var users: Set<Int64> = []
    }

    private let pending = SynchronizedBox(Pending())
    private let stopping = SynchronizedBox(false)
    private let intervalMilliseconds: Int

    public init(intervalMilliseconds: Int = 1000) {
        self.intervalMilliseconds = intervalMilliseconds
    }

    /// Notes that a device checked in (v2).
    public func device(_ id: Int64) {
        pending.withLock { _ = $0.devices.insert(id) }
    }

    /// Notes that a user checked in (v1): the record and all its devices.
    public func user(_ recordID: Int64) {
        pending.withLock { _ = $0.users.insert(recordID) }
    }

    /// Writes what is pending. Returns how many ids were written.
    @discardableResult
    public func flush(database: any SQLDatabase, now: Timestamp = .now()) throws -> Int {
        let batch = pending.withLock { state -> Pending in
            let taken = state
            state = Pending()
            return taken
        }
        let time = now.databaseString
        do {
            for chunk in Array(batch.devices).chunked(500) {
                try database.execute("UPDATE Devices SET last_checkin_at = \(time) WHERE id IN (\(list: chunk))")
            }
            for chunk in Array(batch.users).chunked(500) {
                try database.execute("""
                    UPDATE EnsSubscriptionInfo s LEFT JOIN Devices d ON d.subscription_row = s.id
                    SET s.last_checkin_at = \(time), d.last_checkin_at = \(time) WHERE s.id IN (\(list: chunk))
                    """)
            }
        } catch {
            // Keep them for the next try (the database may be restarting).
            pending.withLock { state in
                state.devices.formUnion(batch.devices)
                state.users.formUnion(batch.users)
            }
            throw error
        }
        return batch.devices.count + batch.users.count
    }

    /// Runs the flusher until `stop()`; then flushes one last time.
    public func run(database: any SQLDatabase, logger: Logger) {
        while !stopping.withLock({ $0 }) {
            sleepMilliseconds(intervalMilliseconds)
            do {
                try flush(database: database)
            } catch {
                logger.warning("check-ins not written yet; will retry", metadata: ["db.error": "\(error)"])
            }
        }
        _ = try? flush(database: database)
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
