#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex with a condition variable, for waits that can last a disk sync.
/// Swift's `Mutex` spins before it sleeps, which is right for short critical sections
/// and wasteful when a dozen threads wait for one fdatasync. Owns both pthread objects
/// (heap-allocated: they must not move) and destroys them in `deinit`. The state it
/// guards lives with the caller, who touches it only inside `withLock`.
public final class ConditionLock: @unchecked Sendable {
    // @unchecked: every use of the pthread objects goes through pthread calls, which
    // are thread-safe by definition.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Inside `withLock` only: sleeps with the lock released until `broadcast()` (or a
    /// spurious wake-up: callers re-check their condition in a loop).
    public func wait() {
        pthread_cond_wait(condition, mutex)
    }

    /// Inside `withLock` only: runs `body` with the lock released, then takes it again.
    public func unlocked<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_unlock(mutex)
        defer { pthread_mutex_lock(mutex) }
        return try body()
    }

    /// Wakes every thread in `wait()`.
    public func broadcast() {
        pthread_cond_broadcast(condition)
    }
}
