#if canImport(Glibc)
import Glibc
#endif

/// Listening and connecting on Unix-domain stream sockets.
public enum UnixSocket {
    public enum ListenError: Error, CustomStringConvertible, Sendable {
        case pathTooLong(String)
        case alreadyServed(String)
        case system(SystemError)

        public var description: String {
            switch self {
            case .pathTooLong(let path): "socket path is longer than the 107 bytes a Unix socket allows: \(path)"
            case .alreadyServed(let path): "another process is already listening on \(path); refusing to take it over"
            case .system(let error): error.description
            }
        }
    }

    /// Binds and listens on `path` the way OpenSMTPD's control socket does: refuse if a live
    /// process answers there, unlink a stale path, bind with no permissions, then chmod.
    /// Returns the listening descriptor and the inode of the socket file (to unlink only
    /// our own socket later).
    public static func listen(path: String, mode: UInt32, backlog: Int32) throws(ListenError) -> (fd: Int32, inode: UInt64) {
        var address = try makeAddress(path)
        if canConnect(&address) { throw .alreadyServed(path) }
        if unlink(path) != 0 && errno != ENOENT {
            throw .system(SystemError(call: "unlink", errno: errno))
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError(call: "socket", errno: errno)) }
        // The socket file takes the socket's own mode (less the umask) at bind: none, so
        // nobody can connect before the chmod below. Not umask(), which is the whole
        // process's and would narrow files other threads create meanwhile.
        guard fchmod(fd, 0) == 0 else {
            let code = errno
            close(fd)
            throw .system(SystemError(call: "fchmod", errno: code))
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        let bindErrno = errno
        guard bound == 0 else {
            close(fd)
            throw .system(SystemError(call: "bind", errno: bindErrno))
        }
        guard chmod(path, mode) == 0, Glibc.listen(fd, backlog) == 0 else {
            let code = errno
            close(fd)
            throw .system(SystemError(call: "listen", errno: code))
        }
        var info = stat()
        stat(path, &info)
        return (fd, UInt64(info.st_ino))
    }

    /// Unlinks `path` only if it is still the socket we created (a newer instance may have
    /// replaced it; unlinking that one would break it).
    public static func unlinkIfOurs(path: String, inode: UInt64) {
        var info = stat()
        if stat(path, &info) == 0 && UInt64(info.st_ino) == inode {
            unlink(path)
        }
    }

    /// Connects to `path`; returns the connected descriptor.
    public static func connect(path: String) throws(ListenError) -> Int32 {
        var address = try makeAddress(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(SystemError(call: "socket", errno: errno)) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw .system(SystemError(call: "connect", errno: code))
        }
        return fd
    }

    private static func canConnect(_ address: inout sockaddr_un) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }

    private static func makeAddress(_ path: String) throws(ListenError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity, !bytes.isEmpty else { throw .pathTooLong(path) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }
}

/// Small descriptor helpers.
public enum FileDescriptor {
    public static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Whether `fd` is a terminal (a person is watching), not a pipe, file or journal.
    public static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// Points `fd` at /dev/null: what it was (a CGI program's standard output, the web
    /// server's pipe) is closed, so the reader sees the end, while the number stays
    /// taken and nothing opened later lands on it.
    public static func detachToDevNull(_ fd: Int32) throws(SystemError) {
        let null = try syscall("open /dev/null") { Glibc.open("/dev/null", O_WRONLY) }
        defer { _ = Glibc.close(null) }
        _ = try syscall("dup2") { Glibc.dup2(null, fd) }
    }

    /// Clears FD_CLOEXEC so that a spawned child inherits `fd`.
    public static func setInheritable(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFD)
        if flags >= 0 { _ = fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) }
    }
}

extension FileDescriptor {
    /// Writes all of `bytes` (retrying short writes and EINTR).
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws(SystemError) {
        var offset = 0
        while offset < bytes.count {
            let written = try syscall("write") {
                bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            }
            offset += written
        }
    }

    /// One write of as much of `bytes` as the descriptor takes (retrying EINTR); the
    /// count written. A caller that must know whether anything at all left (to retry
    /// safely on another connection, say) starts with this, then `writeAll` the rest.
    public static func writeSome(_ fd: Int32, _ bytes: ArraySlice<UInt8>) throws(SystemError) -> Int {
        try syscall("write") { bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress!, $0.count) } }
    }

    /// Whether a connected socket has nothing to read and no hang-up pending: a kept
    /// connection that is still quiet may be used again; one whose peer closed it (or
    /// that holds bytes nobody asked for) may not.
    public static func isQuiet(_ fd: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = Glibc.poll(&entry, 1, 0)
        return ready == 0
    }

    /// Reads what is available, up to `maximum` bytes; empty at end of stream.
    public static func read(_ fd: Int32, maximum: Int = 65536) throws(SystemError) -> [UInt8] {
        // Read straight into the result's uninitialised storage: zero-filling 64 KiB
        // and copying out what arrived cost more than the read of a small frame.
        var failure: SystemError?
        let bytes = [UInt8](unsafeUninitializedCapacity: maximum) { buffer, initialized in
            do throws(SystemError) {
                initialized = try syscall("read") { Glibc.read(fd, buffer.baseAddress, maximum) }
            } catch {
                failure = error
                initialized = 0
            }
        }
        if let failure { throw failure }
        return bytes
    }

    /// Makes reads and writes on a socket fail with EAGAIN after `milliseconds`.
    public static func setTimeouts(_ fd: Int32, milliseconds: Int) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }
}
