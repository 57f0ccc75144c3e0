internal import POSIX
internal import ENSModel

/// Progress of a long job, on standard error when that is a terminal (a person waiting),
/// at most a few times a second; nothing under cron or systemd.
public final class TerminalProgress: Sendable {
    public static let shared = TerminalProgress()
    public let enabled = FileDescriptor.isTerminal(2)
    private let last = SynchronizedBox<(what: String, at: UInt64)>(("", 0))

    public func report(_ what: String, _ count: Int) {
        guard enabled else { return }
        let now = MonotonicClock.milliseconds()
        let show = last.withLock { last -> Bool in
            guard last.what != what || now - last.at >= 200 else { return false }
            last = (what, now)
            return true
        }
        if show { try? FileDescriptor.writeAll(2, Array("\r\u{1B}[K\(count) \(what)".utf8)) }
    }

    public func finish() {
        if enabled { try? FileDescriptor.writeAll(2, Array("\r\u{1B}[K".utf8)) }
    }
}
