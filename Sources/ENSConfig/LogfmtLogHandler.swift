#if canImport(Glibc)
import Glibc
#endif
public import Logging
import Synchronization

/// A swift-log handler that writes one logfmt line per event to stderr:
///
///     2026-11-22T12:00:00.123Z level=warning process=ens-fcgi pid=42 msg="database unreachable" db.error="MariaDB connect failed: error 2002 (...)"
///
/// Messages are fixed phrases; values travel as metadata. Nothing here filters secrets:
/// the rule is that callers never put an email, password, token or key into a log call.
public struct LogfmtLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    /// Process-wide, so a reload (SIGHUP) changes it for every logger at once.
    public var logLevel: Logger.Level {
        get { Self.levels[Int(Self.currentLevel.load(ordering: .relaxed))] }
        set { Self.setLevel(newValue) }
    }
    private let label: String

    private static let levels = Logger.Level.allCases
    private static let currentLevel = Atomic<UInt8>(UInt8(Logger.Level.allCases.firstIndex(of: .info)!))

    /// Sets the level every ENS logger of this process logs at.
    public static func setLevel(_ level: Logger.Level) {
        currentLevel.store(UInt8(levels.firstIndex(of: level) ?? 2), ordering: .relaxed)
    }

    public init(label: String) {
        self.label = label
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var line = Self.timestamp()
        line += " level=\(event.level.rawValue) process=\(label) pid=\(getpid()) msg=\(Self.quote(event.message.description))"
        var merged = self.metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for key in merged.keys.sorted() {
            line += " \(key)=\(Self.quote(merged[key]!.description))"
        }
        line += "\n"
        Self.write(Self.toJournal ? Self.priorityPrefix(event.level) + line : line)
    }

    /// Under systemd with stderr connected to the journal (JOURNAL_STREAM names the
    /// very file stderr is), each line starts with its syslog priority, `<3>` for an
    /// error: journald strips the prefix and files the line at that priority, so
    /// `journalctl -p warning` finds ENS's warnings. Elsewhere lines are left as they are.
    static let toJournal: Bool = {
        guard let stream = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        var status = stat()
        guard fstat(2, &status) == 0 else { return false }
        return journalStream(stream, matchesDevice: UInt64(status.st_dev), inode: UInt64(status.st_ino))
    }()

    /// Whether JOURNAL_STREAM's "device:inode" (decimal) names this file.
    static func journalStream(_ value: String, matchesDevice device: UInt64, inode: UInt64) -> Bool {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 2 && UInt64(parts[0]) == device && UInt64(parts[1]) == inode
    }

    /// sd-daemon(3)'s priority prefix for a level.
    static func priorityPrefix(_ level: Logger.Level) -> String {
        switch level {
        case .trace, .debug: "<7>"
        case .info: "<6>"
        case .notice: "<5>"
        case .warning: "<4>"
        case .error: "<3>"
        case .critical: "<2>"
        }
    }

    /// Installs this handler process-wide for `label` at `level`.
    public static func bootstrap(label: String, level: String) {
        let parsed = Logger.Level(rawValue: level) ?? .info
        setLevel(parsed)
        LoggingSystem.bootstrap { _ in LogfmtLogHandler(label: label) }
    }

    /// Quotes a value when it contains spaces, quotes or control characters; control
    /// characters are escaped so one event is always one line.
    static func quote(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.unicodeScalars.contains { $0 == " " || $0 == "\"" || $0 == "=" || $0 == "\\" || isControl($0) }
        guard needsQuotes else { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if isControl(scalar) { out += "\\u{\(String(scalar.value, radix: 16))}" } else { out.unicodeScalars.append(scalar) }
            }
        }
        return out + "\""
    }

    /// C0 and C1 controls, DEL, and the Unicode line/paragraph separators: anything a log
    /// reader or terminal could take as a line break or an escape sequence.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(now.tv_nsec / 1_000_000), 3))Z"
    }

    private static let writeLock = Mutex(())

    /// One write(2) per line, under a lock, so lines from several threads never interleave.
    private static func write(_ line: String) {
        writeLock.withLock { _ in
            var bytes = Array(line.utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress! + offset, $0.count - offset) }
                if written <= 0 { break }
                offset += written
            }
        }
    }
}
