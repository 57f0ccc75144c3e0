#if canImport(Glibc)
import Glibc
#endif

/// The service manager's notification protocol (sd_notify(3)) without libsystemd: one
/// datagram to the socket NOTIFY_SOCKET names. Outside systemd (no NOTIFY_SOCKET) every
/// call does nothing, so the programs run the same under spawn-fcgi, cron or a shell.
public enum SystemdNotifier {
    /// Sends `state` ("READY=1", "STOPPING=1", "WATCHDOG=1", "STATUS=..."); true if a
    /// service manager is listening and took it.
    @discardableResult
    public static func notify(_ state: String) -> Bool {
        guard let path = getenv("NOTIFY_SOCKET").map({ String(cString: $0) }), !path.isEmpty else { return false }
        return send(state, to: path)
    }

    /// How often systemd expects WATCHDOG=1 (half its WatchdogSec=), if it watches this
    /// process: WATCHDOG_USEC set and WATCHDOG_PID absent or ours.
    public static var watchdogInterval: Duration? {
        guard let text = getenv("WATCHDOG_USEC").map({ String(cString: $0) }), let microseconds = Int64(text), microseconds > 0 else { return nil }
        if let pid = getenv("WATCHDOG_PID").map({ String(cString: $0) }), Int32(pid) != getpid() { return nil }
        return .microseconds(microseconds / 2)
    }

    /// One datagram to a path, or to an abstract address ("@name").
    static func send(_ state: String, to path: String) -> Bool {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        // The address is the family and exactly the path's bytes (an abstract name has no terminator).
        let length = socklen_t(MemoryLayout.offset(of: \sockaddr_un.sun_path)! + bytes.count + (bytes.first == 0 ? 0 : 1))
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let message = Array(state.utf8)
        let sent = message.withUnsafeBytes { body in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, body.baseAddress, body.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        return sent == message.count
    }
}
