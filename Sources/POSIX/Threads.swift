#if canImport(Glibc)
import Glibc
#endif

/// A joinable OS thread. Responder threads block in C calls (accept, MariaDB, libcurl),
/// so they must be real threads, not tasks on Swift's cooperative pool.
public final class OSThread: @unchecked Sendable {
    private let handle: pthread_t

    private final class Start {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private init(handle: pthread_t) { self.handle = handle }

    /// Starts `body` on a new thread with `stackSize` bytes of stack.
    public static func start(stackSize: Int = 512 * 1024, _ body: @escaping @Sendable () -> Void) throws(SystemError) -> OSThread {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, stackSize)
        let start = Unmanaged.passRetained(Start(body)).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(&handle, &attributes, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            start.body()
            return nil
        }, start)
        guard result == 0 else {
            Unmanaged<Start>.fromOpaque(start).release()
            throw SystemError(call: "pthread_create", errno: result)
        }
        return OSThread(handle: handle)
    }

    public func join() {
        pthread_join(handle, nil)
    }

    /// Lets the thread finish on its own; it must not be joined afterwards.
    public func detach() {
        pthread_detach(handle)
    }

    /// Interrupts a blocking system call in this thread (it returns EINTR), using the
    /// signal set up by `Signals.installInterruptHandler()`.
    public func interrupt() {
        pthread_kill(handle, Signals.interruptSignal)
    }
}
