#if canImport(Glibc)
import Glibc
#endif

/// A counting limit that holds across every process of the host: at most `slots`
/// holders per bucket at once. Each slot is a file under `directory` locked with
/// flock(2); the kernel releases a lock when its descriptor closes or its process dies,
/// so a crashed responder never keeps a slot. Keys are spread over a fixed number of
/// buckets (so the directory never grows): two keys that share a bucket share its
/// slots, which can only make the limit stricter, never looser. A bucket can also be
/// told to wait until a time (a server's Retry-After), which every process then honours.
public struct FileSlots: Sendable {
    public let directory: String
    public let slots: Int
    public let buckets: Int

    /// Creates `directory` (mode 0770) if it is missing, and checks a slot can be locked.
    public init(directory: String, slots: Int, buckets: Int = 1024) throws(SystemError) {
        self.directory = directory
        self.slots = max(1, slots)
        self.buckets = max(1, buckets)
        try Files.createDirectory(directory, mode: 0o770)
        guard let fd = try Files.tryLock(path(bucket: 0, slot: 0)) else { return }
        close(fd)
    }

    /// Runs `body` holding one of the key's slots; nil (not run) when all are held.
    /// A slot file that cannot be opened counts as held.
    public func withSlot<T, Failure: Error>(key: String, _ body: () throws(Failure) -> T) throws(Failure) -> T? {
        let bucket = Int(Self.stableHash(key) % UInt64(buckets))
        for slot in 0..<slots {
            // try? flattens tryLock's optional: nil is both "held" and "cannot be opened".
            guard let fd = try? Files.tryLock(path(bucket: bucket, slot: slot)) else { continue }
            defer { close(fd) }
            return try body()
        }
        return nil
    }

    /// Until when (milliseconds since the epoch) the key's bucket is told to wait, as
    /// `block` left it; 0 when it is not.
    public func blockedUntil(key: String) -> Int64 {
        guard let bytes = try? Files.read(blockPath(key), limit: 32),
              let text = String(validating: bytes, as: UTF8.self), let until = Int64(text) else { return 0 }
        return until
    }

    /// Makes every process wait until `until` (milliseconds since the epoch) before the
    /// key's next request, unless a later time is already set.
    public func block(key: String, untilMilliseconds until: Int64) {
        guard until > blockedUntil(key: key) else { return }
        try? Files.writeAtomically(Array(String(until).utf8), to: blockPath(key), mode: 0o644)
    }

    private func blockPath(_ key: String) -> String {
        "\(directory)/\(Int(Self.stableHash(key) % UInt64(buckets))).after"
    }

    func path(bucket: Int, slot: Int) -> String {
        "\(directory)/\(bucket).\(slot)"
    }

    /// FNV-1a: the same in every process (Swift's `Hasher` is seeded per process).
    static func stableHash(_ key: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in key.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return hash
    }
}
