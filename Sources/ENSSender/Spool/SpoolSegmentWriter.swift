internal import OpenSSL
internal import POSIX
import Synchronization

/// The spool segment being appended to, and how far it is written and synced.
final class SpoolSegmentWriter: @unchecked Sendable {
    // @unchecked: `synced` and `syncing` are only touched under `commit`.
    let number: UInt32
    let file: LogFile
    /// The key this segment's records are sealed under.
    let key: AESGCMKey
    /// Bytes written (the segment header included); only the appender (under its lock)
    /// advances it.
    let end: Atomic<Int>
    /// Set when a write or sync failed: nothing more is appended here.
    let broken = Atomic<Bool>(false)
    /// Group commit: one thread syncs while the others sleep; when it is done, every
    /// store its sync covered returns, and one of the rest syncs for all of them.
    private let commit = ConditionLock()
    private var synced = 0
    private var syncing = false

    init(number: UInt32, file: LogFile, key: AESGCMKey, headerSize: Int) {
        self.number = number
        self.file = file
        self.key = key
        self.end = Atomic(headerSize)
    }

    /// Returns once the bytes before `position` are durable.
    func synchronize(through position: Int) throws {
        try commit.withLock {
            while synced < position {
                guard !broken.load(ordering: .acquiring) else { throw Spool.SegmentBroken() }
                if syncing {
                    commit.wait()
                    continue
                }
                syncing = true
                let target = end.load(ordering: .acquiring)
                let failure: (any Error)? = commit.unlocked {
                    do {
                        try file.synchronize()
                        return nil
                    } catch {
                        return error
                    }
                }
                syncing = false
                commit.broadcast()
                if let failure {
                    // After a failed fdatasync the kernel may have dropped the dirty
                    // pages; a later "successful" sync would prove nothing.
                    broken.store(true, ordering: .releasing)
                    throw failure
                }
                synced = target
            }
        }
    }
}
