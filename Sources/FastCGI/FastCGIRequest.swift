internal import CFastCGI
#if canImport(Glibc)
import Glibc
#endif

/// libfcgi's process-wide state.
public enum FastCGILibrary {
    /// Initialises libfcgi once per process, before any request object is made.
    ///
    /// libfcgi installs its own SIGTERM/SIGUSR1/SIGPIPE handlers here; callers block those
    /// signals in every thread and take them with `sigwait`, so the handlers never run.
    public static func initialize() throws(FastCGIError) {
        guard FCGX_Init() == 0 else { throw FastCGIError(operation: "FCGX_Init", code: -1) }
    }

}

/// A failed libfcgi call. libfcgi reports failures as negative return codes (errno
/// values or its own FCGX_* codes); this is the one place they become Swift errors.
public struct FastCGIError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let code: Int32
    public var description: String { "\(operation) failed with code \(code)" }
}

/// One responder thread's FastCGI request slot.
///
/// libfcgi keeps pointers into `FCGX_Request` inside its streams, so the struct lives at
/// a stable heap address owned by this object; it is freed (and its connection closed)
/// in `deinit`. A slot is used by one thread at a time.
public final class FastCGIRequest {
    private let request: UnsafeMutablePointer<FCGX_Request>

    /// Prepares a slot for connections from `connections`.
    public init(connections: ConnectionMultiplexer) throws(FastCGIError) {
        request = .allocate(capacity: 1)
        let result = FCGX_InitRequest(request, connections.listenFD, 0)
        guard result == 0 else {
            request.deallocate()
            throw FastCGIError(operation: "FCGX_InitRequest", code: result)
        }
    }

    deinit {
        FCGX_Free(request, 1)
        request.deallocate()
    }

    /// Waits for the next request on any of the multiplexer's connections and reads its
    /// parameters. Returns false once the multiplexer is shut down.
    public func accept(from connections: ConnectionMultiplexer) -> Bool {
        while let fd = connections.nextConnection() {
            // Hand libfcgi a connection that is already open. keepConnection = 1 stops
            // the FCGX_Finish_r at the top of FCGX_Accept_r from closing it.
            request.pointee.ipcFd = fd
            request.pointee.keepConnection = 1
            if FCGX_Accept_r(request) >= 0 { return true }
            // The connection was closed by nginx or broken: libfcgi closed it, then found
            // no new connection on the non-blocking listener. Wait for the next one.
            if request.pointee.ipcFd >= 0 {
                close(request.pointee.ipcFd)
                request.pointee.ipcFd = -1
            }
        }
        return false
    }

    /// Flushes and completes the current request. A connection nginx wants kept open
    /// goes back to the multiplexer instead of pinning this thread.
    public func finish(returningConnectionTo connections: ConnectionMultiplexer) {
        FCGX_Finish_r(request)
        let fd = request.pointee.ipcFd
        if fd >= 0 {
            request.pointee.ipcFd = -1
            connections.park(fd)
        }
    }

    /// The raw bytes of a FastCGI parameter (CGI variable such as `REQUEST_METHOD` or
    /// `HTTP_APITOKEN`), or nil when nginx did not send it. Callers validate the bytes.
    public func parameter(_ name: String) -> [UInt8]? {
        guard let value = name.withCString({ FCGX_GetParam($0, request.pointee.envp) }) else { return nil }
        return value.withMemoryRebound(to: UInt8.self, capacity: 1) { pointer in
            Array(UnsafeBufferPointer(start: pointer, count: strlen(value)))
        }
    }

    /// Reads up to `limit` bytes of the request body. Reading stops at the end of the
    /// body or at `limit`, whichever comes first, so a lying client cannot make us
    /// buffer more than the limit.
    public func readBody(limit: Int) -> [UInt8] {
        guard limit > 0 else { return [] }
        var body = [UInt8](repeating: 0, count: limit)
        var filled = 0
        while filled < limit {
            let count = body.withUnsafeMutableBufferPointer { buffer in
                buffer.baseAddress!.advanced(by: filled).withMemoryRebound(to: CChar.self, capacity: limit - filled) {
                    FCGX_GetStr($0, Int32(limit - filled), request.pointee.in)
                }
            }
            if count <= 0 { break }
            filled += Int(count)
        }
        body.removeSubrange(filled...)
        return body
    }

    /// Writes response bytes (CGI headers, blank line, body) to the client.
    /// A closed client is not an error worth reporting: nginx has already given up.
    public func write(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                _ = FCGX_PutStr($0, Int32(buffer.count), request.pointee.out)
            }
        }
    }
}
