public import POSIX
import Synchronization

/// Graph's per-mailbox limits: at most `limit` requests in flight per mailbox, and none
/// while Graph's Retry-After for that mailbox runs. With `hostSlots` the in-flight limit
/// holds across every responder process of the host (Graph counts per mailbox and
/// application, whichever process asks); without, within this process only. Requests
/// that find no room are not sent (the caller falls back to a generic alert), so a busy
/// mailbox never holds a responder thread waiting. A Retry-After holds for every process
/// of the host too, when `hostSlots` is given.
public final class MailboxGate: Sendable {
    private struct State {
        var inFlight: [String: Int] = [:]
        var blockedUntil: [String: UInt64] = [:]
    }

    public let limit: Int
    private let hostSlots: FileSlots?
    private let state = Mutex(State())

    public init(limit: Int, hostSlots: FileSlots? = nil) {
        self.limit = max(1, limit)
        self.hostSlots = hostSlots
    }

    /// Runs `body` in one of the mailbox's slots; nil (not run) when the mailbox has
    /// `limit` requests in flight or is inside a Retry-After.
    @discardableResult
    public func withSlot<T, Failure: Error>(mailbox: String, nowNanoseconds: UInt64, _ body: () throws(Failure) -> T) throws(Failure) -> T? {
        // Another process's Retry-After (a file read, so outside the lock).
        if let hostSlots, hostSlots.blockedUntil(key: mailbox) > WallClock.milliseconds() { return nil }
        let admitted = state.withLock { state -> Bool in
            if let until = state.blockedUntil[mailbox] {
                if until > nowNanoseconds { return false }
                state.blockedUntil[mailbox] = nil
            }
            guard state.inFlight[mailbox, default: 0] < limit else { return false }
            state.inFlight[mailbox, default: 0] += 1
            return true
        }
        guard admitted else { return nil }
        defer {
            state.withLock { state in
                let left = state.inFlight[mailbox, default: 1] - 1
                state.inFlight[mailbox] = left > 0 ? left : nil
            }
        }
        guard let hostSlots else { return try body() }
        return try hostSlots.withSlot(key: mailbox, body)
    }

    /// Graph answered 429 with Retry-After for this mailbox.
    public func block(mailbox: String, for duration: Duration, nowNanoseconds: UInt64) {
        let until = nowNanoseconds &+ UInt64(max(0, duration.wholeMilliseconds)) &* 1_000_000
        state.withLock { state in
            state.blockedUntil[mailbox] = max(state.blockedUntil[mailbox] ?? 0, until)
        }
        hostSlots?.block(key: mailbox, untilMilliseconds: WallClock.milliseconds() + Int64(max(0, duration.wholeMilliseconds)))
    }
}
