internal import POSIX
import Synchronization

/// A responder's hand-off to ens-sender: gives it notifications and waits until the
/// sender says they are durably spooled (or refuses them).
///
/// Without `connections` every call opens a connection of its own. With them, a
/// connection that ended with every answer read goes back to the process's few kept
/// ones and serves the next call: a connect, an accept and two closes fewer per
/// callback on both sides.
public struct SenderClient: Sendable {
    public enum Outcome: Sendable, Equatable {
        case accepted
        /// The sender refused it (`spool-full`, `bad-notification`, ...): nothing was kept.
        case refused(String)
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let problem: String
        public var description: String { "ens-sender unreachable: \(problem)" }
    }

    public let socketPath: String
    public let timeoutMilliseconds: Int
    public let connections: SenderConnections?

    public init(socketPath: String, timeoutMilliseconds: Int = 5000, connections: SenderConnections? = nil) {
        self.socketPath = socketPath
        self.timeoutMilliseconds = timeoutMilliseconds
        self.connections = connections
    }

    public func submit(_ notification: PushNotification) throws(Failure) -> Outcome {
        guard let outcome = try submit(batch: [notification]).first else { throw Failure(problem: "connection closed before an answer") }
        return outcome
    }

    /// Hands over several notifications on one connection, all frames at once, and reads
    /// their answers, which come in the same order (`ens-sender drain`: one sync on the
    /// sender's side covers the lot). Fewer answers than notifications: the sender hung
    /// up after the ones given (it was busy, say); the rest were not taken. Throws only
    /// when there is no answer at all.
    public func submit(batch notifications: [PushNotification]) throws(Failure) -> [Outcome] {
        let frames = notifications.flatMap { Frame(kind: .submit, payload: $0.json).encoded }
        if let connections, let kept = connections.take(path: socketPath) {
            // A kept connection the sender closed meanwhile (a restart, its idle sweep)
            // shows as readable, or fails the first write with nothing sent: either way
            // no notification went out on it, so a new connection carries them instead.
            // Once any byte is written, the outcome is final, as on a new connection.
            if FileDescriptor.isQuiet(kept) {
                if let outcomes = try settle(kept, exchange(kept, frames, expecting: notifications.count, retryIfUnsent: true)) { return outcomes }
            } else {
                FileDescriptor.close(kept)
            }
        }
        return try submitOnNewConnection(frames, count: notifications.count)
    }

    private func submitOnNewConnection(_ frames: [UInt8], count: Int) throws(Failure) -> [Outcome] {
        let fd: Int32
        do {
            fd = try UnixSocket.connect(path: socketPath)
        } catch {
            throw Failure(problem: "\(error)")
        }
        FileDescriptor.setTimeouts(fd, milliseconds: timeoutMilliseconds)
        guard let outcomes = try settle(fd, exchange(fd, frames, expecting: count, retryIfUnsent: false)) else {
            preconditionFailure("a new connection's write failure is read through, not retried")
        }
        return outcomes
    }

    /// The outcomes of `result` on `fd`, which is kept or closed; nil when nothing was
    /// sent (`fd` is closed and another connection may carry the notifications).
    private func settle(_ fd: Int32, _ result: Exchange) throws(Failure) -> [Outcome]? {
        switch result {
        case .answered(let outcomes, let reusable):
            return finish(fd, outcomes, reusable: reusable)
        case .unsent:
            FileDescriptor.close(fd)
            return nil
        case .failed(let problem):
            FileDescriptor.close(fd)
            throw Failure(problem: problem)
        }
    }

    private func finish(_ fd: Int32, _ outcomes: [Outcome], reusable: Bool) -> [Outcome] {
        if reusable, let connections {
            connections.give(fd, path: socketPath)
        } else {
            FileDescriptor.close(fd)
        }
        return outcomes
    }

    private enum Exchange {
        /// Nothing was written (only when `retryIfUnsent`).
        case unsent
        /// At least one answer; `reusable` when all came and nothing else did.
        case answered([Outcome], reusable: Bool)
        case failed(String)
    }

    private func exchange(_ fd: Int32, _ frames: [UInt8], expecting count: Int, retryIfUnsent: Bool) -> Exchange {
        var problem: String?
        var written = 0
        do {
            written = try FileDescriptor.writeSome(fd, frames[...])
            if written < frames.count { try FileDescriptor.writeAll(fd, Array(frames[written...])) }
        } catch {
            if written == 0 && retryIfUnsent { return .unsent }
            problem = "\(error)"  // the sender may have answered (busy) and hung up: read what it said
        }
        var outcomes: [Outcome] = []
        var decoder = FrameDecoder()
        do {
            reading: while outcomes.count < count {
                let bytes = try FileDescriptor.read(fd)
                if bytes.isEmpty { break }
                decoder.append(bytes)
                while let frame = try decoder.next() {
                    switch frame.kind {
                    case .accepted: outcomes.append(.accepted)
                    case .refused: outcomes.append(.refused(String(decoding: frame.payload, as: UTF8.self)))
                    case .submit:
                        problem = "unexpected frame from the sender"
                        break reading
                    }
                }
            }
        } catch {
            problem = problem ?? "\(error)"
        }
        guard !outcomes.isEmpty else { return .failed(problem ?? "connection closed before an answer") }
        return .answered(outcomes, reusable: problem == nil && outcomes.count == count && decoder.isEmpty)
    }
}

/// The connections to ens-sender one responder process keeps between hand-offs, shared by
/// its threads. At most `kept` wait idle (two by default: 64 processes, the pool's
/// most, then hold 128 of the 256 the sender serves, leaving room for ens-cron and
/// bursts); a thread that finds none connects afresh, and closes its connection after
/// if enough are kept already. An idle one is used again only within
/// `reuseMilliseconds` (below the sender's 30 s idle sweep, so it is never closed
/// under a write that has begun).
public final class SenderConnections: Sendable {
    public static let defaultKept = 2

    private struct Idle {
        let fd: Int32
        let path: String
        let since: UInt64
    }

    public let kept: Int
    public let reuseMilliseconds: UInt64
    private let idle = Mutex<[Idle]>([])

    public init(kept: Int = SenderConnections.defaultKept, reuseMilliseconds: UInt64 = 20_000) {
        precondition(kept >= 0, "a negative number of kept connections")
        self.kept = kept
        self.reuseMilliseconds = reuseMilliseconds
    }

    deinit {
        closeIdle()
    }

    /// Closes every idle connection (a reload: ens-sender may have moved or restarted).
    public func closeIdle() {
        for entry in idle.withLock({ list in defer { list.removeAll() }; return list }) { FileDescriptor.close(entry.fd) }
    }

    /// The number of idle connections kept now.
    public var idleCount: Int { idle.withLock { $0.count } }

    /// The most recently returned idle connection to `path`; closes the stale ones.
    func take(path: String) -> Int32? {
        let now = MonotonicClock.milliseconds()
        var stale: [Int32] = []
        let fd = idle.withLock { list -> Int32? in
            list.removeAll { entry in
                let old = entry.path != path || now &- entry.since >= reuseMilliseconds
                if old { stale.append(entry.fd) }
                return old
            }
            return list.popLast()?.fd
        }
        for fd in stale { FileDescriptor.close(fd) }
        return fd
    }

    /// Keeps `fd` for the next hand-off, or closes it when enough are kept.
    func give(_ fd: Int32, path: String) {
        let entry = Idle(fd: fd, path: path, since: MonotonicClock.milliseconds())
        let keptIt = idle.withLock { list -> Bool in
            guard list.count < kept else { return false }
            list.append(entry)
            return true
        }
        if !keptIt { FileDescriptor.close(fd) }
    }
}
