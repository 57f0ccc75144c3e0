#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// State that belongs to one thread (the delivery thread's queue, the intake thread's
/// connections), kept where other threads can hold a reference to its owner.
///
/// The first thread to touch the value owns it; in debug builds every later access
/// checks it comes from that thread and stops the process if not, so a confinement
/// mistake fails a test instead of corrupting state in production. Release builds
/// skip the check: `withValue` is then a plain access. This is the one audited place
/// that says `@unchecked Sendable` for such state (after swift-nio's NIOLoopBound).
public final class ThreadConfined<Value>: @unchecked Sendable {
    private var value: Value
    #if DEBUG
    /// pthread_self of the owner, 0 until the first access.
    private let owner = Atomic<UInt>(0)
    #endif

    public init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with the value, on the owning thread.
    @inline(__always)
    public func withValue<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        #if DEBUG
        checkOwner()
        #endif
        return try body(&value)
    }

    #if DEBUG
    private func checkOwner() {
        let me = UInt(bitPattern: Int(bitPattern: UInt(pthread_self())))
        let (claimed, current) = owner.compareExchange(expected: 0, desired: me, ordering: .acquiringAndReleasing)
        precondition(claimed || current == me, "ThreadConfined<\(Value.self)> touched from a second thread")
    }
    #endif
}
