public import SenderWire
public import OpenSSL
internal import POSIX

/// Hands what another host's spool still holds to this host's running sender
/// (`ens-sender drain`), for a host lost with notifications in its spool.
///
/// The source is read the way `Spool` reads its own (segments, records sealed under keys
/// derived from the shared master key, `.done` marks), but never through `Spool`, which
/// would delete what it cannot read. A record is marked done in the source only after
/// the sender acknowledged it, so a drain interrupted at any point and run again loses
/// nothing: at worst a notification is handed over twice, and it keeps its id, which the
/// sender sends as its collapse id. A segment delivered to the end is removed; one that
/// cannot be read, and every record that does not open, stay where they are, reported.
public struct SpoolDrain {
    public struct Summary: Sendable, Equatable {
        /// Acknowledged by this host's sender and marked done in the source.
        public var handedOver = 0
        /// Past their expiry: marked done without being handed over.
        public var expired = 0
        /// Records that did not open (damaged, or sealed under another master key): left.
        public var unreadable = 0
        /// Refused by the sender for good (not a valid notification): left.
        public var refused = 0
        /// Segment files with nothing readable in them, or that could not be read: left.
        public var damagedSegments = 0
        /// Segment files still in the source afterwards.
        public var segmentsLeft = 0

        public init() {}

        /// Nothing is left in the source: every notification was handed over or had expired.
        public var isEmpty: Bool { segmentsLeft == 0 }
    }

    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let problem: String
        public var description: String { problem }
    }

    /// Notifications per connection to the sender (all written at once, one sync there),
    /// and at most this many bytes of them.
    static let batchSize = 128
    static let batchBytes = 1 << 20
    /// Transient refusals (busy, spool full, a failed sync) are tried again for about this long.
    static let patienceSeconds = 30

    let directory: String
    let key: AESGCMKey
    let submit: ([PushNotification]) throws(SenderClient.Failure) -> [SenderClient.Outcome]
    /// Told about each damaged segment and record (for the operator; no content).
    let report: (String) -> Void
    /// Told how many notifications were handed over so far.
    let progress: (Int) -> Void

    public init(directory: String, masterKey: AESGCMKey,
                submit: @escaping ([PushNotification]) throws(SenderClient.Failure) -> [SenderClient.Outcome],
                report: @escaping (String) -> Void, progress: @escaping (Int) -> Void) {
        self.directory = directory
        key = SpoolLayout.spoolKey(masterKey: masterKey)
        self.submit = submit
        self.report = report
        self.progress = progress
    }

    /// Drains every segment in turn, oldest first. Throws when it cannot go on (the
    /// sender is unreachable or keeps refusing, the source cannot be marked); what was
    /// acknowledged up to then is marked.
    public func run() throws(Failure) -> Summary {
        let log = directory + "/log"
        guard Files.exists(log) else { throw Failure(problem: "\(directory) is not a spool directory (it has no log/)") }
        let numbers: [(UInt32, Bool)]
        do {
            numbers = try SpoolLayout.segmentNumbers(in: log)
        } catch {
            throw Failure(problem: "cannot list \(log): \(error)")
        }
        var summary = Summary()
        for (number, hasRecords) in numbers {
            guard hasRecords else {
                Files.remove(SpoolLayout.donePath(directory, number))  // its segment is gone
                continue
            }
            if try !drainSegment(number, &summary) { summary.segmentsLeft += 1 }
        }
        return summary
    }

    /// Hands over what one segment holds; true when nothing is left of it (then removed).
    private func drainSegment(_ number: UInt32, _ summary: inout Summary) throws(Failure) -> Bool {
        let path = SpoolLayout.segmentPath(directory, number)
        let name = SpoolLayout.paddedNumber(number) + ".seg"
        let offsets: Set<UInt32>, torn: Bool, salt: [UInt8]?, size: Int, reader: LogFile
        do {
            (offsets, torn, salt) = try SpoolLayout.scan(segment: path)
            reader = try LogFile(path: path, mode: .readOnly)
            size = try reader.size()
        } catch {
            report("segment \(name): cannot be read (\(error)); skipped")
            summary.damagedSegments += 1
            return false
        }
        // The smallest record (header, nonce, tag) does not fit in a segment header: a
        // file no larger holds nothing anyone was told was accepted.
        if offsets.isEmpty && size > SpoolLayout.segmentHeaderSize {
            report("segment \(name): no readable record in its \(size) bytes (damaged, or not a spool segment); left in place")
            summary.damagedSegments += 1
            return false
        }
        if torn && !offsets.isEmpty {
            report("segment \(name): ends in a torn or damaged record (a write cut short by a crash is never acknowledged); what precedes it is " +
                   "drained")
        }
        // No marks file is normal (nothing delivered yet: doneOffsets gives none). One
        // that exists but cannot be read is said: its segment is handed over whole
        // again, which repeats pushes (they collapse on the device by their id) rather
        // than lose one.
        let done: Set<UInt32>
        do {
            done = try SpoolLayout.doneOffsets(SpoolLayout.donePath(directory, number))
        } catch {
            report("segment \(name): its delivery marks cannot be read (\(error)); every record in it is handed over again")
            done = []
        }
        let segmentKey = salt.map { SpoolLayout.segmentKey(spoolKey: key, salt: $0) } ?? key
        var marks: LogFile?
        var left = 0
        var unopened = 0
        var batch: [(offset: UInt32, notification: PushNotification)] = []
        var batchBytes = 0
        let now = WallClock.milliseconds()
        for offset in offsets.subtracting(done).sorted() {
            let place = SpoolEntry(segment: number, offset: offset)
            guard let notification = try? SpoolLayout.readRecord(reader, at: place, key: segmentKey, reportedAs: place) else {
                left += 1
                unopened += 1
                continue
            }
            if notification.expiration * 1000 < now {
                try mark(offset, in: number, &marks)
                summary.expired += 1
                continue
            }
            batch.append((offset, notification))
            batchBytes += notification.json.count
            if batch.count >= Self.batchSize || batchBytes >= Self.batchBytes {
                left += try handOver(batch, segment: number, &marks, &summary)
                batch.removeAll()
                batchBytes = 0
            }
        }
        if !batch.isEmpty { left += try handOver(batch, segment: number, &marks, &summary) }
        summary.unreadable += unopened
        if unopened > 0 {
            report("segment \(name): \(unopened) record(s) do not open with this master key (damaged, or another installation's); left in place")
        }
        if left > 0 { return false }
        Files.remove(path)
        Files.remove(SpoolLayout.donePath(directory, number))
        return true
    }

    /// Hands a batch to the sender and marks what it acknowledged; tries again what it
    /// refused for the moment. Returns how many it refused for good.
    private func handOver(_ batch: [(offset: UInt32, notification: PushNotification)], segment: UInt32,
                          _ marks: inout LogFile?, _ summary: inout Summary) throws(Failure) -> Int {
        var waiting = batch[...]
        var refusedForGood = 0
        var lastProblem = ""
        for attempt in 0...Self.patienceSeconds {
            if attempt > 0 { sleepMilliseconds(1000) }
            let outcomes: [SenderClient.Outcome]
            do {
                outcomes = try submit(waiting.map(\.notification))
            } catch {
                throw Failure(problem: "\(error) (is ens-sender running on this host?)")
            }
            var retry: [(offset: UInt32, notification: PushNotification)] = []
            for (index, item) in waiting.enumerated() {
                switch index < outcomes.count ? outcomes[index] : nil {
                case .accepted:
                    try mark(item.offset, in: segment, &marks)
                    summary.handedOver += 1
                case .refused(let reason) where ["busy", "spool-full", "io-error"].contains(reason):
                    lastProblem = reason
                    retry.append(item)
                case .refused(let reason):
                    report("notification \(item.notification.id): refused by the sender (\(reason)); left in place")
                    refusedForGood += 1
                    summary.refused += 1
                case nil:
                    retry.append(item)  // the sender hung up before answering it
                }
            }
            progress(summary.handedOver)
            guard !retry.isEmpty else { return refusedForGood }
            waiting = retry[...]
        }
        throw Failure(problem: "this host's sender keeps refusing (\(lastProblem.isEmpty ? "no answer" : lastProblem)); run the drain again later")
    }

    /// Marks a record done in the source (its segment's `.done` file, as the sender does).
    private func mark(_ offset: UInt32, in segment: UInt32, _ marks: inout LogFile?) throws(Failure) {
        do {
            if marks == nil { marks = try LogFile(path: SpoolLayout.donePath(directory, segment), mode: .append) }
            try marks?.append(SpoolLayout.littleEndian(offset))
        } catch {
            throw Failure(problem: "cannot mark notifications done in \(directory) (\(error)): the source spool must be writable (drain a copy)")
        }
    }
}
