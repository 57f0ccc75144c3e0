#if canImport(Glibc)
import Glibc
#endif

/// Whole-file reads and crash-safe writes, without Foundation.
public enum Files {
    /// Reads a whole file; refuses files larger than `limit` bytes.
    public static func read(_ path: String, limit: Int = 16 * 1024 * 1024) throws(SystemError) -> [UInt8] {
        let fd = try syscall("open") { open(path, O_RDONLY | O_CLOEXEC) }
        defer { close(fd) }
        var result: [UInt8] = []
        // Small files (spool entries, secrets) are read with one buffer of their size.
        var info = stat()
        let expected = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
        var chunk = [UInt8](repeating: 0, count: min(max(expected + 1, 4096), 65536))
        while true {
            let count = try syscall("read") { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if count == 0 { break }
            result.append(contentsOf: chunk[0..<count])
            if result.count > limit { throw SystemError(call: "read", errno: EFBIG) }
        }
        return result
    }

    /// Writes `bytes` to `path` atomically: a temporary file in the same directory,
    /// fsync, rename, then fsync of the directory. Readers see the old or the new file,
    /// never a torn one, even across a crash.
    public static func writeAtomically(_ bytes: [UInt8], to path: String, mode: UInt32 = 0o640) throws(SystemError) {
        // A rewrite of the same file replaces any temporary a crashed writer left behind.
        try write(bytes, temporary: path + ".tmp.\(getpid())", final: path, flags: O_TRUNC, mode: mode)
    }

    /// Modification time and inode of `path`, for cheap change detection; nil if missing.
    public static func signature(_ path: String) -> (inode: UInt64, modified: Int64, size: Int64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        return (UInt64(info.st_ino), modified, Int64(info.st_size))
    }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// The device and inode `path` resolves to (symbolic links followed): two paths with
    /// the same identity are the same file or directory. Nil if it is missing.
    public static func identity(_ path: String) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// mkdir that is content to find the directory already there.
    public static func createDirectory(_ path: String, mode: UInt32) throws(SystemError) {
        guard mkdir(path, mode) == 0 || errno == EEXIST else { throw SystemError(call: "mkdir", errno: errno) }
    }

    /// rmdir; false if the directory is missing or not empty.
    @discardableResult
    public static func removeDirectory(_ path: String) -> Bool {
        rmdir(path) == 0
    }

    /// Removes a file; true if it was there.
    @discardableResult
    public static func remove(_ path: String) -> Bool {
        unlink(path) == 0
    }

    /// Lists the names in a directory (no "." or "..").
    public static func list(_ directory: String) throws(SystemError) -> [String] {
        guard let dir = opendir(directory) else { throw SystemError(call: "opendir", errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Takes an exclusive, non-blocking lock on `path`; returns the descriptor that holds
    /// it, or nil if another process holds it.
    public static func tryLock(_ path: String) throws(SystemError) -> Int32? {
        let fd = try syscall("open") { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 { return fd }
        let code = errno
        close(fd)
        if code == EWOULDBLOCK { return nil }
        throw SystemError(call: "flock", errno: code)
    }

    /// fsyncs the directory that holds `path`, so a file created, renamed or removed
    /// there stays so across a crash.
    public static func synchronizeDirectory(of path: String) {
        let directory: String
        if let slash = path.lastIndex(of: "/") {
            directory = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            directory = "."
        }
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            fsync(fd)
            close(fd)
        }
    }
}

/// Process environment lookups.
public enum Environment {
    public static func get(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }

    /// Sets `name` for this process and the children it starts, unless it is set
    /// already (the operator's value wins). Single-threaded start-up only: setenv is not
    /// safe beside threads that read the environment.
    public static func setDefault(_ name: String, _ value: String) {
        setenv(name, value, 0)
    }
}

extension Files {
    /// Writes `bytes` to `temporary`, fsyncs it, renames it to `final` and fsyncs the
    /// directory: once this returns, the file survives a crash or power loss.
    public static func writeDurably(_ bytes: [UInt8], temporary: String, final: String) throws(SystemError) {
        // O_EXCL: a spool entry's temporary name is unique; finding one means a bug.
        try write(bytes, temporary: temporary, final: final, flags: O_EXCL, mode: 0o600)
    }

    /// The one write-fsync-rename-fsync sequence behind both public writers.
    private static func write(_ bytes: [UInt8], temporary: String, final: String, flags: Int32, mode: UInt32) throws(SystemError) {
        let fd = try syscall("open") { open(temporary, O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode) }
        do {
            try FileDescriptor.writeAll(fd, bytes)
            try syscall("fsync") { fsync(fd) }
            try syscall("fchmod") { fchmod(fd, mode) }  // the umask may have narrowed it
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        close(fd)
        do {
            try syscall("rename") { rename(temporary, final) }
        } catch {
            unlink(temporary)
            throw error
        }
        synchronizeDirectory(of: final)
    }
}
