#if canImport(Glibc)
import Glibc
#endif

/// The few process facts ENS needs, without Foundation.
public enum ProcessInfoLite {
    public static var pid: Int32 { getpid() }

    /// The system's host name (as `hostname` prints it), "unknown" if it cannot be read.
    public static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "unknown" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Ends the process with `status` (after stdio buffers are flushed).
    public static func exit(_ status: Int32) -> Never {
        Glibc.exit(status)
    }
}

/// Writes a line to stderr (for command-line errors before logging is set up).
public func printError(_ message: String) {
    let line = Array((message + "\n").utf8)
    line.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
}
