internal import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// An eventfd that one thread signals and another waits on in a poll of its own (such as
/// libcurl's, through its extra descriptors). A signal sent before the wait is not lost,
/// and many signals wake the waiter once.
public final class WakeSignal: Sendable {
    /// Readable while a signal is pending; watch it for reading.
    public let descriptor: Int32

    public init() throws(SystemError) {
        descriptor = try syscall("eventfd") { eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)) }
    }

    deinit {
        Glibc.close(descriptor)
    }

    public func signal() {
        var one: UInt64 = 1
        _ = Glibc.write(descriptor, &one, 8)
    }

    /// Clears what was signalled; true if anything was.
    @discardableResult
    public func clear() -> Bool {
        var count: UInt64 = 0
        return Glibc.read(descriptor, &count, 8) == 8
    }
}
