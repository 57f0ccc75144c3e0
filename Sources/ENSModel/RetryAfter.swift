/// HTTP's Retry-After (RFC 9110 §10.2.3): how long a server asks to be left alone, as
/// delta-seconds (`120`) or an HTTP-date (`Wed, 25 Nov 2026 12:00:00 GMT`). Push
/// services and Graph send seconds; a date is read too rather than ignored.
public enum RetryAfter {
    /// The wait the header asks for, at most `maximum`; a date in the past is no wait.
    /// nil when absent or unreadable (the caller's own back-off applies).
    public static func parse(_ header: String?, now: Timestamp, maximum: Duration) -> Duration? {
        guard let text = header?.trimmingCharacters(in: " "), !text.isEmpty else { return nil }
        let limit = maximum.components.seconds
        if text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            guard text.utf8.count <= 12, let seconds = Int64(text) else { return .seconds(limit) }  // absurdly long: the maximum
            return .seconds(min(seconds, limit))
        }
        guard let date = Timestamp(httpDate: text) else { return nil }
        let milliseconds = max(0, date.millisecondsSinceEpoch - now.millisecondsSinceEpoch)
        return .milliseconds(min(milliseconds, limit * 1000))
    }
}
