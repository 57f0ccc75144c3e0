public import ENSCore
public import OpenSSL
internal import POSIX
#if canImport(Glibc)
import Glibc
#endif

/// The durable queue between "accepted" and "delivered": one file per notification in
/// `<spool>/queue`, written as `<spool>/tmp/<name>`, fsynced, renamed, directory fsynced
/// (the OpenSMTPD way), and only then acknowledged. Contents are sealed with AES-256-GCM
/// under a key derived from the master key (sender and subject are personal data), bound
/// to the file name. Files are named so that sorting them gives the arrival order.
public final class Spool: Sendable {
    public struct Full: Error, CustomStringConvertible, Sendable {
        public var description: String { "spool full" }
    }

    private let directory: String
    private let key: AESGCMKey
    private let capacity: Int
    private let sequence = SynchronizedBox<(lastMilliseconds: Int64, counter: Int)>((0, 0))
    private let size: SynchronizedBox<Int>

    public init(directory: String, masterKey: AESGCMKey, capacity: Int) throws {
        self.directory = directory
        self.key = masterKey.derived(label: "ens/v1/spool")
        self.capacity = capacity
        for sub in ["", "/tmp", "/queue"] where !Files.exists(directory + sub) {
            guard mkdir(directory + sub, 0o700) == 0 || errno == EEXIST else {
                throw SystemError(call: "mkdir \(directory + sub)", errno: errno)
            }
        }
        // Leftovers in tmp/ were never acknowledged: drop them.
        for name in try Files.list(directory + "/tmp") { unlink(directory + "/tmp/" + name) }
        self.size = SynchronizedBox(try Files.list(directory + "/queue").count)
    }

    public var count: Int { size.withLock { $0 } }

    /// Queued names in arrival order (for replay after a restart).
    public func pending() throws -> [String] {
        try Files.list(directory + "/queue").sorted()
    }

    /// Stores a notification durably; returns its spool name.
    public func store(_ notification: PushNotification) throws -> String {
        let reserved = size.withLock { count -> Bool in
            guard count < capacity else { return false }
            count += 1
            return true
        }
        guard reserved else { throw Full() }
        do {
            let name = nextName(id: notification.id)
            let sealed = try key.seal(notification.json, associatedData: Array(name.utf8))
            try Files.writeDurably(sealed, temporary: directory + "/tmp/" + name, final: directory + "/queue/" + name)
            return name
        } catch {
            size.withLock { $0 -= 1 }
            throw error
        }
    }

    public func load(_ name: String) throws -> PushNotification {
        let sealed = try Files.read(directory + "/queue/" + name, limit: 1 << 20)
        return try PushNotification(json: key.open(sealed, associatedData: Array(name.utf8)))
    }

    /// Removes a delivered or permanently rejected notification.
    public func remove(_ name: String) {
        if unlink(directory + "/queue/" + name) == 0 {
            size.withLock { $0 -= 1 }
        }
    }

    private func nextName(id: String) -> String {
        let (milliseconds, counter) = sequence.withLock { state -> (Int64, Int) in
            let now = WallClock.milliseconds()
            if now > state.lastMilliseconds {
                state = (now, 0)
            } else {
                state.counter += 1
            }
            return (state.lastMilliseconds, state.counter)
        }
        let stamp = String(milliseconds)
        let count = String(counter)
        return String(repeating: "0", count: max(0, 15 - stamp.count)) + stamp + "-" + String(repeating: "0", count: max(0, 6 - count.count)) + count + "-" + id
    }
}
