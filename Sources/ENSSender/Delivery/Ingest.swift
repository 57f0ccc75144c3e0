public import ENSMetrics
public import SenderWire
public import Logging
internal import POSIX
import Synchronization

/// ens-sender's intake: serves every responder connection on the Unix socket from one
/// thread, and acknowledges a notification only once it is durably spooled.
///
/// Each turn reads what the ready connections sent, writes every submission in it to
/// the spool, syncs once for all of them (group commit), then answers them in the order
/// they came. A thread per connection, each sleeping until a sync covered its own
/// record and then woken to answer, spent most of ingest's CPU on waking threads
/// (0.14 ms per notification, more than delivering it).
///
/// A connection that does not read its answers is not read from until it does, so a
/// stuck responder holds at most the answers to what it sent in one read. Connections
/// idle for 30 s are closed; beyond 256 connections a new one is refused with `busy`.
public final class Ingest: Sendable {
    // The connections and counters live in an `IntakeLoop` that `run` makes on its own
    // thread and keeps there: confined by construction, nothing to take on trust.
    public static let maximumConnections = 256
    static let idleMilliseconds: UInt64 = 30_000
    static let acceptedKey = MetricsText.key("ens_push_intake_total", [("outcome", "accepted")])
    static let refusedKey = MetricsText.key("ens_push_intake_total", [("outcome", "refused")])

    fileprivate struct Client {
        var decoder = FrameDecoder()
        var unsent: [UInt8] = []
        var lastActive: UInt64
        /// Watched for room to write instead of for input.
        var waitingToWrite = false
        /// After a malformed frame: answer it, then hang up.
        var hangUpWhenFlushed = false
    }

    /// What a submission gets, in arrival order; `spooled` answers wait for the commit.
    fileprivate enum Answer {
        case spooled(id: String)
        case refused(String)
    }

    fileprivate let listener: Int32
    fileprivate let spool: Spool
    fileprivate let metrics: MetricsRecorder
    fileprivate let logger: Logger
    fileprivate let handOff: @Sendable ([(entry: SpoolEntry, notification: PushNotification)]) -> Void
    fileprivate let poller: Poller
    private let stopping = Atomic<Bool>(false)
    fileprivate let accepted = Atomic<Int>(0)

    /// Serves `listener` (made non-blocking here); `handOff` receives what each commit
    /// made durable, in arrival order, before anyone is told it was accepted.
    public init(listener: Int32, spool: Spool, metrics: MetricsRecorder, logger: Logger,
                handOff: @escaping @Sendable ([(entry: SpoolEntry, notification: PushNotification)]) -> Void) throws {
        self.listener = listener
        self.spool = spool
        self.metrics = metrics
        self.logger = logger
        self.handOff = handOff
        poller = try Poller()
        try FileDescriptor.setNonBlocking(listener)
        try poller.add(listener, .readable)
    }

    /// Makes `run` return after the turn it is in (whose answers are still sent).
    public func stop() {
        stopping.store(true, ordering: .releasing)
        poller.wake()
    }

    fileprivate var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Responder connections accepted so far (responders keep theirs between hand-offs,
    /// so this grows with responder threads, not with notifications).
    public var connectionsAccepted: Int { accepted.load(ordering: .relaxed) }

    /// Serves the socket until `stop()`; run it on a thread of its own.
    public func run() {
        IntakeLoop(self).run()
    }
}

/// The intake thread's state and work: the responder connections, their frames and
/// answers, and the log-once counters.
private final class IntakeLoop {
    typealias Client = Ingest.Client
    typealias Answer = Ingest.Answer

    private let ingest: Ingest
    private let listener: Int32
    private let spool: Spool
    private let metrics: MetricsRecorder
    private let logger: Logger
    private let handOff: @Sendable ([(entry: SpoolEntry, notification: PushNotification)]) -> Void
    private let poller: Poller
    private var clients: [Int32: Client] = [:]
    /// Refusals for a full spool since the last log line about them: a full spool under
    /// load refuses thousands a second, and one line every 10 s says as much.
    private var spoolFullRefusals = 0
    private var spoolFullLogged: UInt64 = 0
    private var acceptFailureLogged: UInt64 = 0

    init(_ ingest: Ingest) {
        self.ingest = ingest
        listener = ingest.listener
        spool = ingest.spool
        metrics = ingest.metrics
        logger = ingest.logger
        handOff = ingest.handOff
        poller = ingest.poller
    }

    func run() {
        var lastSweep = MonotonicClock.milliseconds()
        while !ingest.isStopping {
            let events = poller.wait(timeoutMilliseconds: 1000)
            let now = MonotonicClock.milliseconds()
            var batch = Spool.Batch()
            var answers: [(fd: Int32, answer: Answer)] = []
            var acceptPending = false
            for event in events {
                if event.fd == listener {
                    acceptPending = true
                    continue
                }
                // A hang-up is reported to a connection waiting to write as well: the
                // failed write then ends it instead of the event coming back every turn.
                if event.writable || clients[event.fd]?.waitingToWrite == true { flush(event.fd) }
                if event.readable { receive(event.fd, now: now, into: &batch, answering: &answers) }
            }
            settle(batch, answers)
            // Hang-ups wait until now, so that no answer can reach a new connection that
            // was given the number of one closed in this turn.
            for (fd, client) in clients where client.hangUpWhenFlushed && client.unsent.isEmpty { close(fd) }
            if acceptPending { acceptConnections(now: now) }
            if now - lastSweep >= 1000 {
                lastSweep = now
                for (fd, client) in clients where now - client.lastActive > Ingest.idleMilliseconds { close(fd) }
            }
            if spoolFullRefusals > 0 && (spoolFullLogged == 0 || now - spoolFullLogged >= 10_000) {
                logger.warning("spool full; refusing notifications", metadata: ["spool.size": "\(spool.count)", "refused": "\(spoolFullRefusals)"])
                spoolFullRefusals = 0
                spoolFullLogged = now
            }
        }
        for fd in Array(clients.keys) { close(fd) }
    }

    // MARK: Connections

    private func acceptConnections(now: UInt64) {
        while true {
            let fd: Int32
            do {
                guard let accepted = try FileDescriptor.acceptPending(listener) else { return }
                fd = accepted
            } catch {
                // Out of descriptors, say: the listener stays readable, so back off
                // instead of spinning on it, and say so once every 10 s at most.
                if acceptFailureLogged == 0 || now - acceptFailureLogged >= 10_000 {
                    logger.error("cannot accept a responder connection", metadata: ["error": "\(error)"])
                    acceptFailureLogged = now
                }
                sleepMilliseconds(10)
                return
            }
            guard clients.count < Ingest.maximumConnections else {
                _ = try? FileDescriptor.writeAvailable(fd, Frame(kind: .refused, payload: Array("busy".utf8)).encoded[...])
                FileDescriptor.close(fd)
                continue
            }
            do {
                try poller.add(fd, .readable)
                clients[fd] = Client(lastActive: now)
                ingest.accepted.add(1, ordering: .relaxed)
            } catch {
                logger.error("cannot watch a responder connection", metadata: ["error": "\(error)"])
                FileDescriptor.close(fd)
            }
        }
    }

    private func close(_ fd: Int32) {
        guard clients.removeValue(forKey: fd) != nil else { return }
        poller.remove(fd)
        FileDescriptor.close(fd)
    }

    // MARK: Frames in

    /// One read from `fd`; every complete frame in it gets an answer (or a spool write
    /// whose answer waits for the commit).
    private func receive(_ fd: Int32, now: UInt64, into batch: inout Spool.Batch, answering answers: inout [(fd: Int32, answer: Answer)]) {
        guard var client = clients[fd], !client.hangUpWhenFlushed, !client.waitingToWrite else { return }
        defer { clients[fd] = client }
        let outcome: FileDescriptor.ReadOutcome
        do {
            outcome = try FileDescriptor.readAvailable(fd)
        } catch {
            client.hangUpWhenFlushed = true  // reset by the responder
            return
        }
        switch outcome {
        case .wouldBlock:
            return
        case .end:
            client.hangUpWhenFlushed = true  // the responder went away; what it sent is still answered (to no one)
            return
        case .bytes(let bytes):
            client.lastActive = now
            client.decoder.append(bytes)
        }
        do {
            while let frame = try client.decoder.next() {
                answers.append((fd, submission(frame, into: &batch)))
            }
        } catch {
            logger.warning("refused a malformed frame", metadata: ["error": "\(error)"])
            answers.append((fd, .refused(error.reason)))
            client.hangUpWhenFlushed = true
        }
    }

    private func submission(_ frame: Frame, into batch: inout Spool.Batch) -> Answer {
        guard frame.kind == .submit else { return .refused("bad-frame") }
        let notification: PushNotification
        do {
            notification = try PushNotification(json: frame.payload)
        } catch {
            logger.warning("refused an invalid notification", metadata: ["error": "\(error)"])
            return .refused("bad-notification")
        }
        do {
            try spool.write(notification, into: &batch)
            return .spooled(id: notification.id)
        } catch is Spool.Full {
            spoolFullRefusals += 1
            return .refused("spool-full")
        } catch {
            logger.error("cannot spool a notification", metadata: ["error": "\(error)"])
            return .refused("io-error")
        }
    }

    // MARK: Answers out

    /// Commits the turn's spool writes, hands them to delivery, then answers everyone.
    private func settle(_ batch: Spool.Batch, _ answers: [(fd: Int32, answer: Answer)]) {
        guard !answers.isEmpty else { return }
        var durable = true
        if !batch.isEmpty {
            do {
                try spool.commit(batch)
                handOff(batch.spooled)
            } catch {
                durable = false
                logger.error("cannot spool notifications", metadata: ["error": "\(error)", "notifications": "\(batch.entries.count)"])
            }
        }
        var answered: Set<Int32> = []
        var accepted = 0
        for (fd, answer) in answers {
            let frame: Frame
            switch answer {
            case .spooled(let id) where durable:
                frame = Frame(kind: .accepted, payload: Array(id.utf8))
            case .spooled:
                frame = Frame(kind: .refused, payload: Array("io-error".utf8))
            case .refused(let reason):
                frame = Frame(kind: .refused, payload: Array(reason.utf8))
            }
            if frame.kind == .accepted { accepted += 1 }
            guard clients[fd] != nil else { continue }
            clients[fd]!.unsent += frame.encoded
            answered.insert(fd)
        }
        // Counted once a turn: the metric's key is a string built per call.
        if accepted > 0 { metrics.add(Ingest.acceptedKey, Double(accepted)) }
        if answers.count > accepted { metrics.add(Ingest.refusedKey, Double(answers.count - accepted)) }
        for fd in answered { flush(fd) }
    }

    /// Writes what `fd` will take of its answers; reads from it stop until the rest is written.
    private func flush(_ fd: Int32) {
        guard var client = clients[fd] else { return }
        do {
            let written = try FileDescriptor.writeAvailable(fd, client.unsent[...])
            client.unsent.removeFirst(written)
        } catch {
            client.unsent.removeAll()
            client.hangUpWhenFlushed = true  // the responder is gone; nothing more to say
        }
        let blocked = !client.unsent.isEmpty
        if blocked != client.waitingToWrite {
            client.waitingToWrite = blocked
            try? poller.modify(fd, blocked ? .writable : .readable)
        }
        clients[fd] = client
    }
}
