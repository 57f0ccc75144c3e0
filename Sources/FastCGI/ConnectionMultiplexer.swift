internal import POSIX
#if canImport(Glibc)
import Glibc
#endif

/// Shares one process's FastCGI connections among its responder threads.
///
/// libfcgi on its own parks a thread on each kept-alive nginx connection until nginx
/// closes it, so idle connections starve new ones once they outnumber the threads.
/// Here idle connections wait in one `Poller` set instead (one-shot, so exactly one
/// thread takes each ready descriptor); any free thread takes whichever connection has
/// a request ready. nginx can then keep many connections open (no
/// connect/accept/close per request) while a handful of threads do the work.
public final class ConnectionMultiplexer: Sendable {
    let listenFD: Int32
    private let poller: Poller

    /// Prepares to accept on `listenFD`, which is switched to non-blocking mode (a
    /// thread that loses the race for a new connection must not block in accept).
    public init(listenFD: Int32) throws(FastCGIError) {
        self.listenFD = listenFD
        do throws(SystemError) {
            try FileDescriptor.setNonBlocking(listenFD)
            poller = try Poller()
            try poller.add(listenFD, [.readable, .oneShot])
        } catch {
            throw FastCGIError(operation: error.call, code: error.errno)
        }
    }

    /// Wakes every waiting thread; from now on `nextConnection` returns nil.
    public func shutdown() {
        poller.shutDown()
    }

    /// Waits for a connection with a request ready to read: a new one (accepted here)
    /// or a parked kept-alive one. Nil once `shutdown()` was called.
    func nextConnection() -> Int32? {
        while !poller.isShutDown {
            guard let event = poller.wait(timeoutMilliseconds: -1, maximum: 1).first else { continue }
            guard event.fd == listenFD else { return event.fd }
            // libfcgi reads and writes its connections blocking.
            let accepted = Result { () throws(SystemError) in try FileDescriptor.acceptPending(listenFD, nonBlocking: false) }
            // Re-arm the listener at once so another thread can take the next one.
            try? poller.modify(listenFD, [.readable, .oneShot])
            switch accepted {
            case .success(let connection?):
                return connection
            case .success(nil):
                continue
            case .failure(let error):
                if error.errno == EMFILE || error.errno == ENFILE {
                    // Out of descriptors: back off instead of spinning on the listener.
                    usleep(10_000)
                }
            }
        }
        return nil
    }

    /// Puts an idle kept-alive connection back; it comes out of `nextConnection` when
    /// nginx sends its next request (or closes it, which libfcgi then notices).
    func park(_ fd: Int32) {
        do {
            try poller.modify(fd, [.readable, .oneShot])
        } catch {
            do {
                try poller.add(fd, [.readable, .oneShot])
            } catch {
                close(fd)
            }
        }
    }
}
