#if canImport(Glibc)
import Glibc
#endif

/// An open file read and written at explicit offsets (pread/pwrite), for append-only
/// logs: the descriptor is owned here and closed in `deinit`. Positional I/O needs no
/// shared file position, so several threads may read while one appends.
public final class LogFile: @unchecked Sendable {
    // @unchecked: `fd` never changes after init, and pread/pwrite/fdatasync are
    // safe to call concurrently on one descriptor.
    private let fd: Int32

    public enum Mode: Sendable {
        /// A new file; fails if the path exists (a log segment is never reopened for writing).
        case createNew
        /// An existing file, read only.
        case readOnly
        /// Opened for appending, created if missing (a side file of small records).
        case append
    }

    public init(path: String, mode: Mode) throws(SystemError) {
        switch mode {
        case .createNew: fd = try syscall("open") { open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) }
        case .readOnly: fd = try syscall("open") { open(path, O_RDONLY | O_CLOEXEC) }
        case .append: fd = try syscall("open") { open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600) }
        }
    }

    deinit { _ = close(fd) }

    /// The file's current size in bytes.
    public func size() throws(SystemError) -> Int {
        var info = stat()
        try syscall("fstat") { fstat(fd, &info) }
        return Int(info.st_size)
    }

    /// Writes all of `bytes` at `offset` (retrying short writes and EINTR).
    public func write(_ bytes: [UInt8], at offset: Int) throws(SystemError) {
        var done = 0
        while done < bytes.count {
            let written = try syscall("pwrite") {
                bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            }
            done += written
        }
    }

    /// Appends `bytes` (for files opened with `.append`).
    public func append(_ bytes: [UInt8]) throws(SystemError) {
        try FileDescriptor.writeAll(fd, bytes)
    }

    /// Reads exactly `count` bytes at `offset`; fewer only if the file ends first.
    public func read(count: Int, at offset: Int) throws(SystemError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = try syscall("pread") {
                buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset + done)) }
            }
            if got == 0 { break }
            done += got
        }
        return done == count ? buffer : Array(buffer[0..<done])
    }

    /// Makes everything written so far durable (data and the size that covers it).
    public func synchronize() throws(SystemError) {
        try syscall("fdatasync") { fdatasync(fd) }
    }
}
