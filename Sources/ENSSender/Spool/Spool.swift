internal import ENSModel
public import SenderWire
public import OpenSSL
internal import POSIX
import Synchronization

/// The durable queue between "accepted" and "delivered": an append-only log.
///
/// `write` appends a record to the current segment file in `<spool>/log`; `commit`
/// returns only after fdatasync, so a responder's acknowledgement (sent after it) means
/// the notification survives kill -9 and power loss. One commit covers every record
/// written before it (group commit): the ingest loop writes all the submissions that
/// arrived together and syncs once; a `store` whose record an earlier sync already
/// covered does not sync again.
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
/// A segment starts with `"ENSK"` and a random salt; a record is `"ENS1"`, the sealed
/// length (UInt32, big-endian), and the notification's JSON sealed with AES-256-GCM
/// (sender and subject are personal data) under the segment's key, derived from the
/// master key ("ens/v1/spool") and the salt ("ens/v2/spool-segment/<salt hex>"), with
/// `"<segment>:<offset>"` as associated data, so a record copied to another place does
/// not open. Segments from before per-segment keys (no header) are read with the spool
/// key itself until they are delivered (see `SpoolLayout`).
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

    /// Why `load` failed, as delivery must treat it: an acknowledged notification is
    /// dropped only when its record cannot be read ever again.
    public enum LoadFailure: Sendable, Equatable {
        /// The disk or the process's limits (EIO, EMFILE, ENOMEM: any system call that
        /// failed): the record is as it was written, to be read again later.
        case transient
        /// Cut short, a bad header, a seal that does not open, a notification that does
        /// not parse, or no longer spooled: reading it again gives the same.
        case permanent

        public init(_ error: any Error) {
            self = error is SystemError ? .transient : .permanent
        }
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

    let directory: String
    let key: AESGCMKey
    private let capacity: Int
    private let segmentLimit: Int
    private let recoveryBox = SynchronizedBox(Recovery())
    /// Notifications stored or being stored and not yet removed (capacity is checked against it).
    private let size: SynchronizedBox<Int>
    private let appender: Mutex<Appender>
    /// The segment new records go to; read without the appender's lock by `markDone` and `compact`.
    private let currentSegment = Atomic<UInt32>(0)
    private let state = Mutex<State>(State())

    private struct Appender {
        var writer: SpoolSegmentWriter?
        var nextSegment: UInt32
    }

    private struct State {
        /// Per segment, the offsets of records not yet done.
        var live: [UInt32: Set<UInt32>] = [:]
        var readers: [UInt32: LogFile] = [:]
        /// Each live segment's key.
        var keys: [UInt32: AESGCMKey] = [:]
        var doneFiles: [UInt32: LogFile] = [:]
        /// Records `compact` moved: from the entry handed out to where the record is now,
        /// and back (so a record moved twice keeps one mapping).
        var relocated: [SpoolEntry: SpoolEntry] = [:]
        var origins: [SpoolEntry: SpoolEntry] = [:]
    }

    public init(directory: String, masterKey: AESGCMKey, capacity: Int, segmentLimit: Int = 16 << 20) throws {
        self.directory = directory
        let key = SpoolLayout.spoolKey(masterKey: masterKey)
        self.key = key
        self.capacity = capacity
        self.segmentLimit = min(max(segmentLimit, 1024), Int(UInt32.max) - SpoolLayout.maximumSealedSize)
        for path in [directory, directory + "/log"] { try Files.createDirectory(path, mode: 0o700) }
        var recovery = Recovery()
        var live: [UInt32: Set<UInt32>] = [:]
        var keys: [UInt32: AESGCMKey] = [:]
        var highest: UInt32 = 0
        for (number, hasRecords) in try SpoolLayout.segmentNumbers(in: directory + "/log") {
            highest = max(highest, number)
            guard hasRecords else {
                Files.remove(SpoolLayout.donePath(directory, number))  // its segment is gone
                continue
            }
            let (offsets, torn, salt) = try SpoolLayout.scan(segment: SpoolLayout.segmentPath(directory, number))
            let remaining = offsets.subtracting(try SpoolLayout.doneOffsets(SpoolLayout.donePath(directory, number)))
            if torn { recovery.tornSegments += 1 }
            if remaining.isEmpty {
                Files.remove(SpoolLayout.segmentPath(directory, number))
                Files.remove(SpoolLayout.donePath(directory, number))
            } else {
                live[number] = remaining
                keys[number] = salt.map { SpoolLayout.segmentKey(spoolKey: key, salt: $0) } ?? key
                recovery.pending += remaining.count
            }
        }
        let count = recovery.pending
        size = SynchronizedBox(count)
        appender = Mutex(Appender(writer: nil, nextSegment: highest + 1))
        state.withLock { state in
            state.live = live
            state.keys = keys
        }
        recoveryBox.withLock { $0 = recovery }
        let imported = try importFilePerNotificationSpool()
        recoveryBox.withLock { $0.imported = imported; $0.pending += imported }
    }

    /// What opening the spool found on disk.
    public var recovery: Recovery { recoveryBox.withLock { $0 } }

    /// Notifications spooled and not yet removed.
    public var count: Int { size.withLock { $0 } }

    /// The oldest segment still holding a notification to deliver (for the heartbeat).
    var oldestLiveSegment: UInt32? {
        state.withLock { state in state.live.filter { !$0.value.isEmpty }.keys.min() }
    }

    /// Everything spooled and not yet removed, in arrival order (for replay after a restart).
    public func pending() -> [SpoolEntry] {
        state.withLock { state in
            state.live.flatMap { segment, offsets in offsets.map { SpoolEntry(segment: segment, offset: $0) } }
        }.sorted()
    }

    /// Notifications written to the spool and not yet durable. `commit` makes them all
    /// durable with one fdatasync per segment, however many there are: the ingest loop
    /// writes every submission that arrived together, commits once, then acknowledges.
    public struct Batch: Sendable {
        /// Each record written: where it went, the end of its segment after it, and what
        /// it holds (delivery takes that as parsed instead of reading, decrypting and
        /// parsing it back from the spool).
        fileprivate var writes: [(entry: SpoolEntry, writer: SpoolSegmentWriter, end: Int, notification: PushNotification)] = []
        public init() {}
        public var entries: [SpoolEntry] { writes.map(\.entry) }
        public var spooled: [(entry: SpoolEntry, notification: PushNotification)] { writes.map { ($0.entry, $0.notification) } }
        public var isEmpty: Bool { writes.isEmpty }
    }

    /// Writes a notification into `batch`. Nothing may be acknowledged before `commit`.
    public func write(_ notification: PushNotification, into batch: inout Batch) throws {
        let reserved = size.withLock { count -> Bool in
            guard count < capacity else { return false }
            count += 1
            return true
        }
        guard reserved else { throw Full() }
        do {
            let (writer, entry, end) = try writeRecord(notification.json)
            batch.writes.append((entry, writer, end, notification))
        } catch {
            size.withLock { $0 -= 1 }  // not acknowledged: the submitter is told it failed
            throw error
        }
    }

    /// Makes every record in `batch` durable. If that fails, none of them counts as
    /// spooled: their submitters are refused, and the records are marked done.
    public func commit(_ batch: Batch) throws {
        var furthest: [ObjectIdentifier: (writer: SpoolSegmentWriter, end: Int)] = [:]
        for write in batch.writes {
            let key = ObjectIdentifier(write.writer)
            if write.end > furthest[key]?.end ?? 0 { furthest[key] = (write.writer, write.end) }
        }
        do {
            for (writer, end) in furthest.values { try writer.synchronize(through: end) }
        } catch {
            for write in batch.writes { _ = markDone(write.entry) }
            size.withLock { $0 -= batch.writes.count }
            throw error
        }
    }

    /// Stores one notification durably; returns its entry.
    public func store(_ notification: PushNotification) throws -> SpoolEntry {
        var batch = Batch()
        try write(notification, into: &batch)
        try commit(batch)
        return batch.entries[0]
    }

    public func load(_ entry: SpoolEntry) throws -> PushNotification {
        let (place, reader, segmentKey) = try state.withLock { state throws -> (SpoolEntry, LogFile, AESGCMKey) in
            let place = state.relocated[entry] ?? entry
            guard state.live[place.segment]?.contains(place.offset) == true, let segmentKey = state.keys[place.segment] else {
                throw NotSpooled(entry: entry)
            }
            if let reader = state.readers[place.segment] { return (place, reader, segmentKey) }
            let reader = try LogFile(path: SpoolLayout.segmentPath(directory, place.segment), mode: .readOnly)
            state.readers[place.segment] = reader
            return (place, reader, segmentKey)
        }
        return try SpoolLayout.readRecord(reader, at: place, key: segmentKey, reportedAs: entry)
    }

    /// Marks a delivered or permanently rejected notification done; deletes its segment
    /// once nothing in it is left to deliver. Removing twice changes nothing.
    public func remove(_ entry: SpoolEntry) {
        let place = state.withLock { state -> SpoolEntry in
            guard let place = state.relocated.removeValue(forKey: entry) else { return entry }
            state.origins[place] = nil
            return place
        }
        if markDone(place) { size.withLock { $0 -= 1 } }
    }

    /// Moves the few records left in otherwise finished segments to the current one, so
    /// that a notification retried for hours (until it expires) does not keep a whole
    /// segment on disk. Entries handed out before stay valid: `load` and `remove` follow
    /// the move. Run by the delivery thread, the only caller of `load` and `remove`.
    /// Returns how many records moved.
    @discardableResult
    public func compact(segmentsWithAtMost threshold: Int = 64) -> Int {
        let sparse: [SpoolEntry] = state.withLock { state in
            let current = currentSegment.load(ordering: .acquiring)
            return state.live.filter { $0.key != current && $0.value.count <= threshold }
                .flatMap { segment, offsets in offsets.map { SpoolEntry(segment: segment, offset: $0) } }
        }
        var moved = 0
        for place in sparse {
            // A damaged record stays where it is; delivery drops it with a log line.
            guard let notification = try? load(place), let destination = try? append(notification.json) else { continue }
            state.withLock { state in
                let origin = state.origins.removeValue(forKey: place) ?? place
                state.relocated[origin] = destination
                state.origins[destination] = origin
            }
            _ = markDone(place)  // only after the copy is durable; a lost mark means a replay
            moved += 1
        }
        return moved
    }

    /// Appends a record and returns once it is durable (for `compact`).
    private func append(_ json: [UInt8]) throws -> SpoolEntry {
        let (writer, entry, end) = try writeRecord(json)
        do {
            try writer.synchronize(through: end)
        } catch {
            _ = markDone(entry)
            throw error
        }
        return entry
    }

    /// Seals and writes a record to the current segment; returns where it went and the
    /// segment's end after it. Durable only once the segment is synced through that end.
    private func writeRecord(_ json: [UInt8]) throws -> (SpoolSegmentWriter, SpoolEntry, Int) {
        try appender.withLock { appender in
            let writer = try writableSegment(&appender, adding: SpoolLayout.headerSize + AESGCMKey.nonceSize + json.count + AESGCMKey.tagSize)
            let offset = writer.end.load(ordering: .relaxed)
            let entry = SpoolEntry(segment: writer.number, offset: UInt32(offset))
            let sealed = try writer.key.seal(json, associatedData: SpoolLayout.associatedData(entry))
            let record = SpoolLayout.magic + SpoolLayout.bigEndian(UInt32(sealed.count)) + sealed
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
    }

    /// Takes a record out of its segment's live set and writes its done mark; deletes the
    /// segment when that was its last record and it is no longer written to.
    private func markDone(_ place: SpoolEntry) -> Bool {
        state.withLock { state -> Bool in
            guard state.live[place.segment]?.remove(place.offset) != nil else { return false }
            do {
                if state.doneFiles[place.segment] == nil {
                    state.doneFiles[place.segment] = try LogFile(path: SpoolLayout.donePath(directory, place.segment), mode: .append)
                }
                try state.doneFiles[place.segment]?.append(SpoolLayout.littleEndian(place.offset))
            } catch {
                // Without the mark it is delivered again after a restart, with the same collapse id.
            }
            if state.live[place.segment]?.isEmpty == true && place.segment != currentSegment.load(ordering: .acquiring) {
                deleteSegment(place.segment, &state)
            }
            return true
        }
    }

    // MARK: Segments

    /// The segment to append `recordSize` bytes to: the current one, or a new one when
    /// there is none yet, it is full, or it broke.
    private func writableSegment(_ appender: inout Appender, adding recordSize: Int) throws -> SpoolSegmentWriter {
        let empty = SpoolLayout.segmentHeaderSize
        if let writer = appender.writer, !writer.broken.load(ordering: .acquiring),
           writer.end.load(ordering: .relaxed) == empty || writer.end.load(ordering: .relaxed) + recordSize <= segmentLimit {
            return writer
        }
        let number = appender.nextSegment
        // Taken whatever happens below: a name left behind by a failure (a header that
        // did not fit on a full disk) must not be tried again by every later store.
        appender.nextSegment += 1
        let path = SpoolLayout.segmentPath(directory, number)
        let salt = try Digest.randomBytes(SpoolLayout.saltSize)
        let file = try LogFile(path: path, mode: .createNew)
        // Synced with the segment's first commit, before any record in it is acknowledged.
        do {
            try file.write(SpoolLayout.segmentHeader(salt: salt), at: 0)
        } catch {
            Files.remove(path)  // holds nothing: no record was written to it
            throw error
        }
        let segmentKey = SpoolLayout.segmentKey(spoolKey: key, salt: salt)
        let writer = SpoolSegmentWriter(number: number, file: file, key: segmentKey, headerSize: empty)
        Files.synchronizeDirectory(of: path)  // the new name must survive a crash before any record in it is acknowledged
        state.withLock { $0.keys[number] = segmentKey }
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
        state.keys[number] = nil
        state.doneFiles[number] = nil
        Files.remove(SpoolLayout.segmentPath(directory, number))
        Files.remove(SpoolLayout.donePath(directory, number))
    }
}
