internal import CLinux
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Readiness of many descriptors at once (epoll), for one thread that serves them all
/// or for several that take turns (one-shot interest), plus an eventfd so another
/// thread can wake a waiter, or every waiter for good (`shutDown`).
public final class Poller: @unchecked Sendable {
    // @unchecked: the descriptors are set once; epoll and eventfd calls are thread-safe,
    // and the shutdown flag is atomic.

    public struct Interest: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let readable = Interest(rawValue: EPOLLIN.rawValue)
        public static let writable = Interest(rawValue: EPOLLOUT.rawValue)
        /// Reported to one waiter once, then disarmed until `modify` re-arms it: how
        /// several threads share one set without two taking the same descriptor.
        public static let oneShot = Interest(rawValue: EPOLLONESHOT.rawValue)
    }

    public struct Event: Sendable {
        public let fd: Int32
        /// Readable, or the peer hung up or the descriptor failed (a read says which).
        public let readable: Bool
        public let writable: Bool
    }

    private let epollFD: Int32
    private let wakeFD: Int32
    private let shutdownFlag = Atomic<Bool>(false)

    public init() throws(SystemError) {
        epollFD = try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        do throws(SystemError) {
            wakeFD = try syscall("eventfd") { eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)) }
        } catch {
            Glibc.close(epollFD)
            throw error
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)
    }

    deinit {
        Glibc.close(wakeFD)
        Glibc.close(epollFD)
    }

    public func add(_ fd: Int32, _ interest: Interest) throws(SystemError) {
        try control(EPOLL_CTL_ADD, fd, interest)
    }

    public func modify(_ fd: Int32, _ interest: Interest) throws(SystemError) {
        try control(EPOLL_CTL_MOD, fd, interest)
    }

    /// Stops watching `fd` (before it is closed, so a reused number starts clean).
    public func remove(_ fd: Int32) {
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
    }

    /// Makes the current or next `wait` return.
    public func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    /// Makes every current and later `wait` return at once, for good: the eventfd is
    /// left readable, so each waiting thread sees it.
    public func shutDown() {
        shutdownFlag.store(true, ordering: .releasing)
        wake()
    }

    public var isShutDown: Bool { shutdownFlag.load(ordering: .acquiring) }

    /// Waits up to `timeoutMilliseconds` (-1: no limit) for descriptors to become ready;
    /// empty after a timeout, an interrupted wait or a `wake()`.
    public func wait(timeoutMilliseconds: Int32, maximum: Int = 256) -> [Event] {
        var raw = [epoll_event](repeating: epoll_event(), count: maximum)
        let count = epoll_wait(epollFD, &raw, Int32(maximum), timeoutMilliseconds)
        guard count > 0 else { return [] }
        var events: [Event] = []
        events.reserveCapacity(Int(count))
        let readableMask = EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue
        for event in raw[0..<Int(count)] {
            if event.data.fd == wakeFD {
                if !isShutDown {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                }
                continue
            }
            events.append(Event(fd: event.data.fd, readable: event.events & readableMask != 0,
                                writable: event.events & EPOLLOUT.rawValue != 0))
        }
        return events
    }

    private func control(_ operation: Int32, _ fd: Int32, _ interest: Interest) throws(SystemError) {
        var event = epoll_event()
        event.events = interest.rawValue
        event.data.fd = fd
        try syscall("epoll_ctl") { epoll_ctl(epollFD, operation, fd, &event) }
    }
}

/// Non-blocking socket I/O, for descriptors served from a `Poller`.
extension FileDescriptor {
    public enum ReadOutcome: Sendable {
        case bytes([UInt8])
        case wouldBlock
        case end
    }

    public static func setNonBlocking(_ fd: Int32) throws(SystemError) {
        let flags = try syscall("fcntl") { fcntl(fd, F_GETFL) }
        try syscall("fcntl") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
    }

    /// Accepts a pending connection, close-on-exec and (unless a blocking library such
    /// as libfcgi will own it) non-blocking; nil when none is waiting.
    public static func acceptPending(_ listener: Int32, nonBlocking: Bool = true) throws(SystemError) -> Int32? {
        let fd = Glibc.accept(listener, nil, nil)
        if fd >= 0 {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            guard nonBlocking else { return fd }
            do throws(SystemError) {
                try setNonBlocking(fd)
            } catch {
                Glibc.close(fd)
                throw error
            }
            return fd
        }
        let code = errno
        // ECONNABORTED: that client gave up while queued; the next may be fine.
        if code == EAGAIN || code == EWOULDBLOCK || code == EINTR || code == ECONNABORTED { return nil }
        throw SystemError(call: "accept4", errno: code)
    }

    /// Reads what is available without blocking.
    public static func readAvailable(_ fd: Int32, maximum: Int = 65536) throws(SystemError) -> ReadOutcome {
        do throws(SystemError) {
            let bytes = try read(fd, maximum: maximum)
            return bytes.isEmpty ? .end : .bytes(bytes)
        } catch where error.errno == EAGAIN || error.errno == EWOULDBLOCK {
            return .wouldBlock
        }
    }

    /// Writes what the socket takes now; returns how many bytes that was (0 if none).
    public static func writeAvailable(_ fd: Int32, _ bytes: ArraySlice<UInt8>) throws(SystemError) -> Int {
        guard !bytes.isEmpty else { return 0 }
        do throws(SystemError) {
            return try syscall("send") {
                bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
        } catch where error.errno == EAGAIN || error.errno == EWOULDBLOCK {
            return 0
        }
    }
}
