#if canImport(Glibc)
import Glibc
#endif

/// Signal handling for daemons that keep worker threads: block the signals in every
/// thread, then let one thread take them synchronously with `sigwait`.
public enum Signals {
    public static let shutdownSignals: [Int32] = [SIGTERM, SIGINT]
    /// `systemctl reload`: re-read the configuration, never stop.
    public static let reload = SIGHUP
    public static let terminate = SIGTERM
    public static let kill = SIGKILL
    public static let childExited = SIGCHLD

    /// Blocks `signals` in the calling thread and every thread it creates afterwards.
    public static func block(_ signals: [Int32]) {
        var set = makeSet(signals)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Restores `signals` to their default action in the calling thread (and unblocks them).
    public static func unblock(_ signals: [Int32]) {
        var set = makeSet(signals)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// Waits until one of `signals` (which must be blocked) arrives and returns it.
    public static func wait(for signals: [Int32]) -> Int32 {
        var set = makeSet(signals)
        var received: Int32 = 0
        while sigwait(&set, &received) != 0 {}
        return received
    }

    /// The signal `OSThread.interrupt()` sends.
    public static let interruptSignal = SIGUSR2

    /// Installs a do-nothing handler for `interruptSignal` without SA_RESTART, so the
    /// signal makes a blocked accept() or read() return EINTR instead of resuming.
    public static func installInterruptHandler() {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        sigaction(interruptSignal, &action, nil)
    }

    /// Waits up to `timeoutMilliseconds` for one of `signals` (which must be blocked);
    /// nil on timeout.
    public static func wait(for signals: [Int32], timeoutMilliseconds: Int) -> Int32? {
        var set = makeSet(signals)
        var timeout = timespec(tv_sec: timeoutMilliseconds / 1000, tv_nsec: (timeoutMilliseconds % 1000) * 1_000_000)
        let result = sigtimedwait(&set, nil, &timeout)
        return result > 0 ? result : nil
    }

    /// Writes to a closed peer must return EPIPE, not kill the process.
    public static func ignoreBrokenPipe() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Sends `signal` to `pid`; a process that is already gone is not an error.
    public static func send(_ signal: Int32, to pid: Int32) {
        _ = Glibc.kill(pid, signal)
    }

    static func makeSet(_ signals: [Int32]) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        return set
    }

    public static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGTERM: "SIGTERM"
        case SIGINT: "SIGINT"
        case SIGHUP: "SIGHUP"
        case SIGKILL: "SIGKILL"
        case SIGCHLD: "SIGCHLD"
        case SIGSEGV: "SIGSEGV"
        case SIGABRT: "SIGABRT"
        case SIGILL: "SIGILL"
        case SIGTRAP: "SIGTRAP"
        default: "signal \(signal)"
        }
    }
}
