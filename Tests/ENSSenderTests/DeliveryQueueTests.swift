import ENSTestSupport
import Synchronization
import Testing
@testable import ENSSender

@Suite struct DeliveryQueueTests {
    typealias Queue = Sender.DeliveryQueue
    typealias Pending = Sender.Pending

    /// Tests speak of "fresh" and "later" rather than of offsets: each label gets an
    /// entry of its own, remembered here (the offset indexes `names`; `offsets` finds a
    /// label's without a search, as the compaction tests make tens of thousands).
    static let labels = Mutex<(names: [String], offsets: [String: Int])>(([], [:]))

    static func entry(_ label: String) -> SpoolEntry {
        labels.withLock { labels in
            if let offset = labels.offsets[label] { return SpoolEntry(segment: 1, offset: UInt32(offset)) }
            labels.names.append(label)
            labels.offsets[label] = labels.names.count - 1
            return SpoolEntry(segment: 1, offset: UInt32(labels.names.count - 1))
        }
    }

    static func label(_ pending: Pending) -> String {
        labels.withLock { $0.names[Int(pending.entry.offset)] }
    }

    static func pending(_ label: String, attempts: Int = 0, notBefore: Int64 = 0) -> Pending {
        Pending(entry: entry(label), attempts: attempts, notBefore: notBefore)
    }

    static func drain(_ queue: inout Queue) -> [String] {
        var names: [String] = []
        while let pending = queue.next() { names.append(Self.label(pending)) }
        return names
    }

    // A realistic wall-clock time in milliseconds.
    static let t0: Int64 = 1_700_000_000_000

    // MARK: FIFO

    @Test func emptyQueue() {
        var queue = Queue()
        #expect(!queue.hasReady)
        #expect(queue.next() == nil)
        queue.promoteDue(now: Self.t0)
        #expect(queue.next() == nil)
    }

    @Test func nextIsFIFO() {
        var queue = Queue()
        queue.ready = (0..<10).map { Self.pending("n\($0)") }
        #expect(queue.hasReady)
        #expect(Self.drain(&queue) == (0..<10).map { "n\($0)" })
        #expect(!queue.hasReady)
        #expect(queue.next() == nil)
    }

    @Test func appendsWhileDrainingKeepOrder() {
        var queue = Queue()
        var expected: [String] = []
        var got: [String] = []
        var counter = 0
        var generator = SeededGenerator(seed: 0xF1F0)
        for _ in 0..<2000 {
            let arrivals = Int.random(in: 0...5, using: &generator)
            for _ in 0..<arrivals {
                let name = "a\(counter)"
                counter += 1
                queue.ready.append(Self.pending(name))
                expected.append(name)
            }
            for _ in 0..<Int.random(in: 0...5, using: &generator) {
                guard let pending = queue.next() else { break }
                got.append(Self.label(pending))
            }
        }
        got += Self.drain(&queue)
        #expect(got == expected)
    }

    @Test func compactionKeepsOrder() {
        var queue = Queue()
        let total = 20_000
        queue.ready = (0..<total).map { Self.pending("p\($0)") }
        var got: [String] = []
        var compacted = false
        // Pop past the compaction threshold while adding more at the tail.
        for index in 0..<15_000 {
            guard let pending = queue.next() else { break }
            got.append(Self.label(pending))
            if queue.head == 0 { compacted = true }
            if index % 3 == 0 { queue.ready.append(Self.pending("q\(index)")) }
        }
        #expect(compacted)
        // Storage does not keep everything ever popped.
        #expect(queue.ready.count - queue.head == total + 5000 - 15_000)
        #expect(queue.ready.count < total + 5000)
        got += Self.drain(&queue)
        let expected = (0..<total).map { "p\($0)" } + stride(from: 0, to: 15_000, by: 3).map { "q\($0)" }
        #expect(got == expected)
        #expect(queue.next() == nil)
    }

    @Test func compactionHappensRepeatedly() {
        var queue = Queue()
        var expected: [String] = []
        var got: [String] = []
        var compactions = 0
        for round in 0..<3 {
            for index in 0..<6_000 {
                let name = "r\(round)-\(index)"
                queue.ready.append(Self.pending(name))
                expected.append(name)
            }
            for _ in 0..<5_500 {
                guard let pending = queue.next() else { break }
                got.append(Self.label(pending))
                if queue.head == 0 { compactions += 1 }
            }
        }
        #expect(compactions >= 3)
        got += Self.drain(&queue)
        #expect(got == expected)
    }

    // MARK: Delayed retries

    @Test func promoteDueMovesOnlyDueRetries() {
        var queue = Queue()
        queue.ready = [Self.pending("fresh")]
        queue.delayed = [
            Self.pending("due-early", attempts: 1, notBefore: Self.t0 - 5000),
            Self.pending("later", attempts: 2, notBefore: Self.t0 + 10_000),
            Self.pending("due-now", attempts: 3, notBefore: Self.t0),
            Self.pending("just-after", attempts: 1, notBefore: Self.t0 + 1),
        ]
        queue.promoteDue(now: Self.t0)
        // Due retries join the tail in their delayed order; the others keep waiting.
        #expect(queue.ready.map(Self.label) == ["fresh", "due-early", "due-now"])
        #expect(queue.delayed.map(Self.label) == ["later", "just-after"])
        #expect(queue.ready.map(\.attempts) == [0, 1, 3])
        #expect(Self.drain(&queue) == ["fresh", "due-early", "due-now"])
    }

    @Test func promotionRunsAtMostEveryHundredMilliseconds() {
        var queue = Queue()
        queue.delayed = [Self.pending("a", notBefore: Self.t0)]
        queue.promoteDue(now: Self.t0)
        #expect(Self.drain(&queue) == ["a"])

        queue.delayed = [Self.pending("b", notBefore: Self.t0 + 10)]
        // Due at +10, but the last promotion was at t0: nothing moves before t0 + 100.
        queue.promoteDue(now: Self.t0 + 10)
        #expect(queue.next() == nil)
        queue.promoteDue(now: Self.t0 + 99)
        #expect(queue.next() == nil)
        #expect(queue.delayed.count == 1)
        queue.promoteDue(now: Self.t0 + 100)
        #expect(Self.drain(&queue) == ["b"])
        #expect(queue.delayed.isEmpty)

        // The window restarts from that promotion.
        queue.delayed = [Self.pending("c", notBefore: Self.t0 + 150)]
        queue.promoteDue(now: Self.t0 + 150)
        #expect(queue.next() == nil)
        queue.promoteDue(now: Self.t0 + 199)
        #expect(queue.next() == nil)
        queue.promoteDue(now: Self.t0 + 200)
        #expect(Self.drain(&queue) == ["c"])
    }

    @Test func aCheckThatPromotesNothingStillStartsTheWindow() {
        var queue = Queue()
        queue.delayed = [Self.pending("x", notBefore: Self.t0 + 50)]
        queue.promoteDue(now: Self.t0)  // checks, nothing due yet
        #expect(queue.next() == nil)
        queue.promoteDue(now: Self.t0 + 60)  // due, but within 100 ms of the last check
        #expect(queue.next() == nil)
        queue.promoteDue(now: Self.t0 + 100)
        #expect(Self.drain(&queue) == ["x"])
    }

    @Test func anEmptyDelayedListDoesNotStartTheWindow() {
        var queue = Queue()
        queue.promoteDue(now: Self.t0)
        queue.promoteDue(now: Self.t0 + 50)
        queue.delayed = [Self.pending("y", notBefore: Self.t0)]
        // No check has looked at a retry since long ago, so this one runs now.
        queue.promoteDue(now: Self.t0 + 60)
        #expect(Self.drain(&queue) == ["y"])
    }

    @Test func manyRetriesPromotedInOrderOverTime() {
        var queue = Queue()
        var generator = SeededGenerator(seed: 0xDE1A7)
        let retries = (0..<500).map { index in
            Self.pending("d\(index)", attempts: 1, notBefore: Self.t0 + Int64.random(in: 0...10_000, using: &generator))
        }
        queue.delayed = retries
        var promoted: [(name: String, at: Int64)] = []
        var now = Self.t0
        while now <= Self.t0 + 11_000 {
            queue.promoteDue(now: now)
            while let pending = queue.next() { promoted.append((Self.label(pending), now)) }
            now += 25
        }
        #expect(queue.delayed.isEmpty)
        #expect(promoted.count == retries.count)
        #expect(Set(promoted.map { $0.name }) == Set(retries.map(Self.label)))
        let dueTimes = Dictionary(uniqueKeysWithValues: retries.map { (Self.label($0), $0.notBefore) })
        for (name, at) in promoted {
            let due = dueTimes[name]!
            // Never early, and at most one promotion interval (plus a tick) late.
            #expect(at >= due && at < due + 125, "\(name) due \(due) promoted \(at)")
        }
    }
}
