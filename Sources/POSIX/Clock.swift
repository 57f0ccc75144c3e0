#if canImport(Glibc)
import Glibc
#endif

/// Monotonic time for timeouts and cache ages (never wall-clock time).
public enum MonotonicClock {
    public static func nanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    public static func milliseconds() -> UInt64 { nanoseconds() / 1_000_000 }
}

/// Wall-clock time in milliseconds since the Unix epoch, for timestamps stored or shown.
public enum WallClock {
    public static func milliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// Sleeps the calling thread.
public func sleepMilliseconds(_ milliseconds: Int) {
    var remaining = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
    while true {
        var request = remaining
        if nanosleep(&request, &remaining) == 0 || errno != EINTR { return }
    }
}

/// Settings and budgets are `Duration`s; these are the units the C libraries, SQL and
/// the protocols want at the edges.
extension Duration {
    public static func minutes(_ minutes: Int) -> Duration { .seconds(minutes * 60) }
    public static func hours(_ hours: Int) -> Duration { .seconds(hours * 3600) }
    public static func days(_ days: Int) -> Duration { .seconds(days * 86400) }

    /// Whole milliseconds, rounded down (libcurl's and poll's unit).
    public var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }

    /// Whole seconds, rounded down (SQL intervals, Retry-After, APNs expiry).
    public var wholeSeconds: Int64 { components.seconds }

    /// Whole minutes, rounded down (EWS StatusFrequency).
    public var wholeMinutes: Int { Int(components.seconds / 60) }
}
