public import ENSCore
public import OpenSSL
internal import POSIX
import Synchronization

/// Where a spooled notification lives: its log segment and the byte offset of its
/// record. Sorting entries gives arrival order. Eight bytes, because the delivery queue
/// keeps one per spooled notification (100,000 of them must fit in the RSS budget).
public struct SpoolEntry: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let segment: UInt32
    public let offset: UInt32

    public init(segment: UInt32, offset: UInt32) {
        self.segment = segment
        self.offset = offset
    }

    public static func < (lhs: SpoolEntry, rhs: SpoolEntry) -> Bool {
        (lhs.segment, lhs.offset) < (rhs.segment, rhs.offset)
    }

    public var description: String { "\(segment):\(offset)" }
}

/// The durable queue between "accepted" and "delivered": an append-only log.
///
/// `store` appends a record to the current segment file in `<spool>/log` and returns
/// only after fdatasync, so a responder's acknowledgement means the notification
/// survives kill -9 and power loss. Concurrent stores share one fdatasync (group
/// commit): a store whose record an earlier sync already covered does not sync again.
/// (One file per notification — write, fsync, rename, fsync the directory — cost an
/// inode allocation and two fsyncs each and made ingest the bottleneck of delivery.)
///
/// Delivered and permanently rejected notifications are marked done in the segment's
/// `.done` file (4-byte offsets, not synced: a lost mark only means a replay, which the
/// collapse id makes harmless). A segment whose records are all done and that is no
/// longer written to is deleted. Every open starts a new segment, as does every
/// `segmentLimit` bytes, so a record torn by a crash can only be the last one of a
/// segment that is never appended to again; reopening stops reading a segment there.
///
/// A record is `"ENS1"`, the sealed length (UInt32, big-endian), and the notification's
/// JSON sealed with AES-256-GCM under a key derived from the master key ("ens/v1/spool";
/// sender and subject are personal data), with `"<segment>:<offset>"` as associated
/// data, so a record copied to another place does not open.
public final class Spool: Sendable {
    public struct Full: Error, CustomStringConvertible, Sendable {
        public var description: String { "spool full" }
    }

    public struct NotSpooled: Error, CustomStringConvertible, Sendable {
        public let entry: SpoolEntry
        public var description: String { "no spooled notification at \(entry)" }
    }

    /// A write or sync in the current segment failed; the next store starts a new one.
    public struct SegmentBroken: Error, CustomStringConvertible, Sendable {
        public var description: String { "an earlier write to this spool segment failed" }
    }

    public struct DamagedRecord: Error, CustomStringConvertible, Sendable {
        public let entry: SpoolEntry
        public var description: String { "the spool record at \(entry) is damaged" }
    }

    /// What opening the spool found on disk.
    public struct Recovery: Sendable, Equatable {
        /// Notifications still to deliver.
        public var pending = 0
        /// Segments that end in a torn record (a store interrupted by a crash, never acknowledged).
        public var tornSegments = 0
        /// Notifications imported from the spool format before the log (one file each in `queue/`).
        public var imported = 0
    }

    static let magic: [UInt8] = Array("ENS1".utf8)
    static let headerSize = 8
    /// Far above any notification (APNs payloads are at most 4 KiB); a larger length
    /// in a header means the header itself is damaged.
    static let maximumSealedSize = 64 * 1024

    private let directory: String
    private let key: AESGCMKey
    private let capacity: Int
    private let segmentLimit: Int
    private let recoveryBox = SynchronizedBox(Recovery())
    /// Notifications stored or being stored and not yet removed (capacity is checked against it).
    private let size: SynchronizedBox<Int>
    private let appender: Mutex<Appender>
    /// The segment new records go to; read without the appender's lock by `remove`.
    private let currentSegment = Atomic<UInt32>(0)
    private let state = Mutex<State>(State())

    private struct Appender {
        var writer: SegmentWriter?
        var nextSegment: UInt32
    }

    private struct State {
        /// Per segment, the offsets of records not yet done.
        var live: [UInt32: Set<UInt32>] = [:]
        var readers: [UInt32: LogFile] = [:]
        var doneFiles: [UInt32: LogFile] = [:]
    }

    /// The segment being appended to, and how far it is written and synced.
    private final class SegmentWriter: @unchecked Sendable {
        // @unchecked: `synced` and `syncing` are only touched under `commit`.
        let number: UInt32
        let file: LogFile
        /// Bytes written; only the appender (under its lock) advances it.
        let end = Atomic<Int>(0)
        /// Set when a write or sync failed: nothing more is appended here.
        let broken = Atomic<Bool>(false)
        /// Group commit: one thread syncs while the others sleep; when it is done, every
        /// store its sync covered returns, and one of the rest syncs for all of them.
        private let commit = ConditionLock()
        private var synced = 0
        private var syncing = false

        init(number: UInt32, file: LogFile) {
            self.number = number
            self.file = file
        }

        /// Returns once the bytes before `position` are durable.
        func synchronize(through position: Int) throws {
            try commit.withLock {
                while synced < position {
                    guard !broken.load(ordering: .acquiring) else { throw SegmentBroken() }
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

    public init(directory: String, masterKey: AESGCMKey, capacity: Int, segmentLimit: Int = 16 << 20) throws {
        self.directory = directory
        self.key = masterKey.derived(label: "ens/v1/spool")
        self.capacity = capacity
        self.segmentLimit = min(max(segmentLimit, 1024), Int(UInt32.max) - Self.maximumSealedSize)
        for path in [directory, directory + "/log"] { try Files.createDirectory(path, mode: 0o700) }
        var recovery = Recovery()
        var live: [UInt32: Set<UInt32>] = [:]
        var highest: UInt32 = 0
        for (number, hasRecords) in try Self.segmentNumbers(in: directory + "/log") {
            highest = max(highest, number)
            guard hasRecords else {
                Files.remove(Self.donePath(directory, number))  // its segment is gone
                continue
            }
            let (offsets, torn) = try Self.scan(segment: Self.segmentPath(directory, number))
            let remaining = offsets.subtracting(try Self.doneOffsets(Self.donePath(directory, number)))
            if torn { recovery.tornSegments += 1 }
            if remaining.isEmpty {
                Files.remove(Self.segmentPath(directory, number))
                Files.remove(Self.donePath(directory, number))
            } else {
                live[number] = remaining
                recovery.pending += remaining.count
            }
        }
        let count = recovery.pending
        size = SynchronizedBox(count)
        appender = Mutex(Appender(writer: nil, nextSegment: highest + 1))
        state.withLock { $0.live = live }
        recoveryBox.withLock { $0 = recovery }
        let imported = try importFilePerNotificationSpool()
        recoveryBox.withLock { $0.imported = imported; $0.pending += imported }
    }

    /// What opening the spool found on disk.
    public var recovery: Recovery { recoveryBox.withLock { $0 } }

    /// Notifications spooled and not yet removed.
    public var count: Int { size.withLock { $0 } }

    /// Everything spooled and not yet removed, in arrival order (for replay after a restart).
    public func pending() -> [SpoolEntry] {
        state.withLock { state in
            state.live.flatMap { segment, offsets in offsets.map { SpoolEntry(segment: segment, offset: $0) } }
        }.sorted()
    }

    /// Stores a notification durably; returns its entry.
    public func store(_ notification: PushNotification) throws -> SpoolEntry {
        let reserved = size.withLock { count -> Bool in
            guard count < capacity else { return false }
            count += 1
            return true
        }
        guard reserved else { throw Full() }
        let json = notification.json
        let writer: SegmentWriter, entry: SpoolEntry, end: Int
        do {
            (writer, entry, end) = try appender.withLock { appender in
                let writer = try writableSegment(&appender, adding: Self.headerSize + AESGCMKey.nonceSize + json.count + AESGCMKey.tagSize)
                let offset = writer.end.load(ordering: .relaxed)
                let entry = SpoolEntry(segment: writer.number, offset: UInt32(offset))
                let sealed = try key.seal(json, associatedData: Self.associatedData(entry))
                let record = Self.magic + Self.bigEndian(UInt32(sealed.count)) + sealed
                do {
                    try writer.file.write(record, at: offset)
                } catch {
                    writer.broken.store(true, ordering: .releasing)  // a partial record may be there now
                    throw error
                }
                writer.end.store(offset + record.count, ordering: .releasing)
                // Live before it is synced, so the segment cannot be deleted under it.
                state.withLock { _ = $0.live[entry.segment, default: []].insert(entry.offset) }
                return (writer, entry, offset + record.count)
            }
        } catch {
            size.withLock { $0 -= 1 }
            throw error
        }
        do {
            try writer.synchronize(through: end)
        } catch {
            remove(entry)  // not acknowledged: the submitter is told it failed
            throw error
        }
        return entry
    }

    public func load(_ entry: SpoolEntry) throws -> PushNotification {
        let reader = try state.withLock { state throws -> LogFile in
            guard state.live[entry.segment]?.contains(entry.offset) == true else { throw NotSpooled(entry: entry) }
            if let reader = state.readers[entry.segment] { return reader }
            let reader = try LogFile(path: Self.segmentPath(directory, entry.segment), mode: .readOnly)
            state.readers[entry.segment] = reader
            return reader
        }
        let header = try reader.read(count: Self.headerSize, at: Int(entry.offset))
        guard let length = Self.sealedLength(header: header) else { throw DamagedRecord(entry: entry) }
        let sealed = try reader.read(count: length, at: Int(entry.offset) + Self.headerSize)
        guard sealed.count == length else { throw DamagedRecord(entry: entry) }
        return try PushNotification(json: key.open(sealed, associatedData: Self.associatedData(entry)))
    }

    /// Marks a delivered or permanently rejected notification done; deletes its segment
    /// once nothing in it is left to deliver. Removing twice changes nothing.
    public func remove(_ entry: SpoolEntry) {
        let removed = state.withLock { state -> Bool in
            guard state.live[entry.segment]?.remove(entry.offset) != nil else { return false }
            do {
                if state.doneFiles[entry.segment] == nil {
                    state.doneFiles[entry.segment] = try LogFile(path: Self.donePath(directory, entry.segment), mode: .append)
                }
                try state.doneFiles[entry.segment]?.append(Self.littleEndian(entry.offset))
            } catch {
                // Without the mark it is delivered again after a restart, with the same collapse id.
            }
            if state.live[entry.segment]?.isEmpty == true && entry.segment != currentSegment.load(ordering: .acquiring) {
                deleteSegment(entry.segment, &state)
            }
            return true
        }
        if removed { size.withLock { $0 -= 1 } }
    }

    // MARK: Segments

    /// The segment to append `recordSize` bytes to: the current one, or a new one when
    /// there is none yet, it is full, or it broke.
    private func writableSegment(_ appender: inout Appender, adding recordSize: Int) throws -> SegmentWriter {
        if let writer = appender.writer, !writer.broken.load(ordering: .acquiring),
           writer.end.load(ordering: .relaxed) == 0 || writer.end.load(ordering: .relaxed) + recordSize <= segmentLimit {
            return writer
        }
        let number = appender.nextSegment
        let path = Self.segmentPath(directory, number)
        let writer = SegmentWriter(number: number, file: try LogFile(path: path, mode: .createNew))
        Files.synchronizeDirectory(of: path)  // the new name must survive a crash before any record in it is acknowledged
        appender.nextSegment += 1
        let previous = appender.writer
        appender.writer = writer
        currentSegment.store(number, ordering: .releasing)
        if let previous {
            state.withLock { state in
                if state.live[previous.number]?.isEmpty ?? true { deleteSegment(previous.number, &state) }
            }
        }
        return writer
    }

    private func deleteSegment(_ number: UInt32, _ state: inout State) {
        state.live[number] = nil
        state.readers[number] = nil
        state.doneFiles[number] = nil
        Files.remove(Self.segmentPath(directory, number))
        Files.remove(Self.donePath(directory, number))
    }

    static func segmentPath(_ directory: String, _ number: UInt32) -> String {
        directory + "/log/" + paddedNumber(number) + ".seg"
    }

    static func donePath(_ directory: String, _ number: UInt32) -> String {
        directory + "/log/" + paddedNumber(number) + ".done"
    }

    private static func paddedNumber(_ number: UInt32) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, 10 - digits.utf8.count)) + digits
    }

    /// Segment numbers found in the log directory, and whether the segment file itself
    /// is there (a `.done` file can outlive its segment if a crash fell between the two
    /// deletions). Other files are left alone.
    private static func segmentNumbers(in directory: String) throws -> [(UInt32, Bool)] {
        var found: [UInt32: Bool] = [:]
        for name in try Files.list(directory) {
            let parts = name.split(separator: ".")
            guard parts.count == 2, parts[0].utf8.count == 10, parts[0].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let number = UInt32(parts[0]) else { continue }
            if parts[1] == "seg" { found[number] = true } else if parts[1] == "done" { found[number] = found[number] ?? false }
        }
        return found.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// The offsets of the complete records in a segment, and whether it ends in a torn one.
    private static func scan(segment path: String) throws -> (Set<UInt32>, torn: Bool) {
        let file = try LogFile(path: path, mode: .readOnly)
        let size = try file.size()
        var offsets = Set<UInt32>()
        var offset = 0
        while offset < size {
            guard let length = sealedLength(header: try file.read(count: headerSize, at: offset)),
                  offset + headerSize + length <= size else { return (offsets, true) }
            offsets.insert(UInt32(offset))
            offset += headerSize + length
        }
        return (offsets, false)
    }

    private static func doneOffsets(_ path: String) throws -> Set<UInt32> {
        guard Files.exists(path) else { return [] }
        let bytes = try Files.read(path, limit: 1 << 30)
        var offsets = Set<UInt32>()
        var index = 0
        while index + 4 <= bytes.count {  // a torn last mark is ignored: that record is replayed
            offsets.insert(UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24)
            index += 4
        }
        return offsets
    }

    static func sealedLength(header: [UInt8]) -> Int? {
        guard header.count == headerSize, Array(header[0..<4]) == magic else { return nil }
        let length = Int(header[4]) << 24 | Int(header[5]) << 16 | Int(header[6]) << 8 | Int(header[7])
        guard length >= AESGCMKey.nonceSize + AESGCMKey.tagSize, length <= maximumSealedSize else { return nil }
        return length
    }

    static func associatedData(_ entry: SpoolEntry) -> [UInt8] {
        Array("\(entry.segment):\(entry.offset)".utf8)
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    private static func littleEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value & 0xFF), UInt8((value >> 8) & 0xFF), UInt8((value >> 16) & 0xFF), UInt8(value >> 24)]
    }

    // MARK: The spool format before the log

    /// Moves notifications left by a version that kept one file per notification in
    /// `queue/` (sealed with the same key, the file name as associated data) into the
    /// log, then removes the old directories. A file that does not open is left in place.
    private func importFilePerNotificationSpool() throws -> Int {
        let queue = directory + "/queue"
        guard Files.exists(queue) else { return 0 }
        var imported = 0
        for name in try Files.list(queue) {
            guard let sealed = try? Files.read(queue + "/" + name, limit: 1 << 20),
                  let json = try? key.open(sealed, associatedData: Array(name.utf8)),
                  let notification = try? PushNotification(json: json) else { continue }
            _ = try store(notification)
            Files.remove(queue + "/" + name)
            imported += 1
        }
        for name in (try? Files.list(directory + "/tmp")) ?? [] { Files.remove(directory + "/tmp/" + name) }
        Files.removeDirectory(directory + "/tmp")
        Files.removeDirectory(queue)  // stays if an unreadable file is left in it
        return imported
    }
}
