import Synchronization

/// At most `capacity` holders at once, without waiting: a thread that finds the gate
/// full is told so at once and answers 503, instead of joining a queue behind a slow
/// Exchange server while the requests it could have served wait.
public final class ConcurrencyGate: Sendable {
    public let capacity: Int
    private let holders = Atomic<Int>(0)

    public init(capacity: Int) {
        self.capacity = capacity
    }

    /// Runs `body` holding a place, or returns nil without running it when none is free.
    public func ifAvailable<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T? {
        let (taken, _) = holders.add(1, ordering: .acquiringAndReleasing)
        defer { holders.subtract(1, ordering: .acquiringAndReleasing) }
        guard taken <= capacity else { return nil }
        return try body()
    }

    /// Places held now (a gauge; may be momentarily above capacity while refusing).
    public var inUse: Int { holders.load(ordering: .relaxed) }
}
