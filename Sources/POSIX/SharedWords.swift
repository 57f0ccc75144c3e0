#if canImport(Glibc)
import Glibc
#endif
import CLinux

/// A fixed array of 64-bit words in a MAP_SHARED mapping: every process that maps the
/// same memory sees the same words, read and written atomically. The responder pool's
/// processes share one through an inherited memfd (`anonymous`, `inherited`); CGI
/// programs, which share nothing else, map one file (`file`).
///
/// The mapping lives as long as the value (it is never unmapped: a process maps one
/// table for its lifetime).
public final class SharedWords: @unchecked Sendable {
    private let base: UnsafeMutablePointer<UInt64>
    public let count: Int

    private init(fd: Int32, count: Int) throws(SystemError) {
        precondition(count > 0, "a shared table needs at least one word")
        let bytes = count * MemoryLayout<UInt64>.size
        guard let address = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), address != MAP_FAILED else {
            throw SystemError(call: "mmap", errno: errno)
        }
        base = address.bindMemory(to: UInt64.self, capacity: count)
        self.count = count
    }

    /// A new zeroed table in anonymous shared memory (memfd_create); the descriptor is
    /// inherited by programs this process starts (no close-on-exec), which map it with
    /// `inherited(fd:count:)`.
    public static func anonymous(name: String, count: Int) throws(SystemError) -> (words: SharedWords, fd: Int32) {
        let fd = try syscall("memfd_create") { ens_memfd_create(name) }
        do {
            try syscall("ftruncate") { ftruncate(fd, off_t(count * MemoryLayout<UInt64>.size)) }
            return (try SharedWords(fd: fd, count: count), fd)
        } catch {
            close(fd)
            throw error
        }
    }

    /// The table behind an inherited descriptor; fails if it is smaller than `count` words.
    public static func inherited(fd: Int32, count: Int) throws(SystemError) -> SharedWords {
        var status = stat()
        try syscall("fstat") { fstat(fd, &status) }
        guard Int(status.st_size) >= count * MemoryLayout<UInt64>.size else { throw SystemError(call: "fstat", errno: EINVAL) }
        return try SharedWords(fd: fd, count: count)
    }

    /// The table in the file at `path` (created mode 0600), mapped shared. The first
    /// process to find the file empty sizes it and runs `initialize` on it under an
    /// exclusive flock(2), so that every other process sees it initialised.
    public static func file(path: String, count: Int, initialize: (SharedWords) -> Void) throws(SystemError) -> SharedWords {
        let fd = try syscall("open") { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        defer { close(fd) }
        try syscall("flock") { flock(fd, LOCK_EX) }
        defer { flock(fd, LOCK_UN) }
        var status = stat()
        try syscall("fstat") { fstat(fd, &status) }
        let bytes = count * MemoryLayout<UInt64>.size
        if Int(status.st_size) == 0 {
            try syscall("ftruncate") { ftruncate(fd, off_t(bytes)) }
            let words = try SharedWords(fd: fd, count: count)
            initialize(words)
            return words
        }
        guard Int(status.st_size) >= bytes else { throw SystemError(call: "fstat", errno: EINVAL) }
        return try SharedWords(fd: fd, count: count)
    }

    public func load(_ index: Int) -> UInt64 {
        precondition(index >= 0 && index < count, "shared word index out of range")
        return ens_atomic_load_u64(base + index)
    }

    public func store(_ index: Int, _ value: UInt64) {
        precondition(index >= 0 && index < count, "shared word index out of range")
        ens_atomic_store_u64(base + index, value)
    }

    /// Sets the word to `desired` if it holds `expected`; true if it did.
    public func compareExchange(_ index: Int, expected: UInt64, desired: UInt64) -> Bool {
        precondition(index >= 0 && index < count, "shared word index out of range")
        return ens_atomic_cas_u64(base + index, expected, desired)
    }

    /// Lets another thread or process run (while waiting for a word another holds).
    public static func yield() { sched_yield() }
}
