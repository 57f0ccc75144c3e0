internal import CFastCGI
#if canImport(Glibc)
import Glibc
#endif

/// Shares one process's FastCGI connections among its responder threads.
///
/// libfcgi on its own parks a thread on each kept-alive nginx connection until nginx
/// closes it, so idle connections starve new ones once they outnumber the threads.
/// Here idle connections wait in an epoll set instead; any free thread takes whichever
/// connection has a request ready. nginx can then keep many connections open (no
/// connect/accept/close per request) while a handful of threads do the work.
///
/// Owns the epoll descriptor and an eventfd used to wake every thread at shutdown.
public final class ConnectionMultiplexer: @unchecked Sendable {
    // @unchecked: the descriptors are set once; epoll and eventfd calls are thread-safe.
    let listenFD: Int32
    private let epollFD: Int32
    private let wakeFD: Int32

    /// Prepares to accept on `listenFD`, which is switched to non-blocking mode (a
    /// thread that loses the race for a new connection must not block in accept).
    public init(listenFD: Int32) throws(FastCGIError) {
        self.listenFD = listenFD
        let flags = fcntl(listenFD, F_GETFL)
        guard flags >= 0, fcntl(listenFD, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw FastCGIError(operation: "fcntl(O_NONBLOCK) on the listening socket", code: errno)
        }
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw FastCGIError(operation: "epoll_create1", code: errno) }
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC))
        guard wakeFD >= 0 else {
            close(epollFD)
            throw FastCGIError(operation: "eventfd", code: errno)
        }
        try register(listenFD, operation: EPOLL_CTL_ADD, oneShot: true)
        try register(wakeFD, operation: EPOLL_CTL_ADD, oneShot: false)
    }

    deinit {
        close(wakeFD)
        close(epollFD)
    }

    /// Wakes every waiting thread; from now on `nextConnection` returns nil.
    public func shutdown() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Waits for a connection with a request ready to read: a new one (accepted here)
    /// or a parked kept-alive one. Nil once `shutdown()` was called.
    func nextConnection() -> Int32? {
        var event = epoll_event()
        while true {
            let count = epoll_wait(epollFD, &event, 1, -1)
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { continue }
            let fd = Int32(truncatingIfNeeded: event.data.fd)
            if fd == wakeFD { return nil }
            if fd == listenFD {
                let connection = accept(listenFD, nil, nil)
                let acceptErrno = errno
                if connection >= 0 { _ = fcntl(connection, F_SETFD, FD_CLOEXEC) }
                // Re-arm the listener at once so another thread can take the next one.
                try? register(listenFD, operation: EPOLL_CTL_MOD, oneShot: true)
                if connection >= 0 { return connection }
                if acceptErrno == EMFILE || acceptErrno == ENFILE {
                    // Out of descriptors: back off instead of spinning on the listener.
                    usleep(10_000)
                }
                continue
            }
            return fd
        }
    }

    /// Puts an idle kept-alive connection back; it comes out of `nextConnection` when
    /// nginx sends its next request (or closes it, which libfcgi then notices).
    func park(_ fd: Int32) {
        do {
            try register(fd, operation: EPOLL_CTL_MOD, oneShot: true)
        } catch {
            do {
                try register(fd, operation: EPOLL_CTL_ADD, oneShot: true)
            } catch {
                close(fd)
            }
        }
    }

    private func register(_ fd: Int32, operation: Int32, oneShot: Bool) throws(FastCGIError) {
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | (oneShot ? EPOLLONESHOT.rawValue : 0)
        event.data.fd = fd
        guard epoll_ctl(epollFD, operation, fd, &event) == 0 else {
            throw FastCGIError(operation: "epoll_ctl", code: errno)
        }
    }
}
