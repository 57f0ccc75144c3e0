internal import POSIX
import Synchronization

/// Bounds how many responder threads may be held by outbound Exchange work, without
/// waiting: a thread that finds the gate closed is told so at once and answers 503,
/// instead of joining a queue behind a slow Exchange server while the requests it
/// could have served wait.
///
/// Two kinds of bound: `.concurrent(n)` admits at most n holders at once (registrations:
/// each may take the whole registration budget); `.slow(n, afterMilliseconds:)` admits
/// anyone while fewer than n holders have been at it longer than the threshold
/// (callbacks: thousands a second are fine while Exchange answers in milliseconds, and
/// only the ones a slow Exchange holds count against the bound).
public final class ConcurrencyGate: Sendable {
    public enum Bound: Sendable, Equatable {
        case concurrent(Int)
        case slow(Int, afterMilliseconds: UInt64)
    }

    public let bound: Bound
    /// Holders by ticket, with the monotonic time each started.
    private let holders = Mutex<[UInt64: UInt64]>([:])
    private let nextTicket = Atomic<UInt64>(0)

    public init(_ bound: Bound) {
        self.bound = bound
    }

    /// Runs `body` holding a place, or returns nil without running it when the gate is
    /// closed.
    public func ifAvailable<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T? {
        let ticket = nextTicket.add(1, ordering: .relaxed).newValue
        let now = MonotonicClock.milliseconds()
        let admitted = holders.withLock { holders -> Bool in
            switch bound {
            case .concurrent(let capacity):
                guard holders.count < capacity else { return false }
            case .slow(let capacity, let threshold):
                guard holders.values.count(where: { now &- $0 > threshold }) < capacity else { return false }
            }
            holders[ticket] = now
            return true
        }
        guard admitted else { return nil }
        defer { _ = holders.withLock { $0.removeValue(forKey: ticket) } }
        return try body()
    }

    /// Places held now (a gauge).
    public var inUse: Int { holders.withLock { $0.count } }
}
