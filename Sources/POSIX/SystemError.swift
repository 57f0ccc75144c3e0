#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call: the call's name and the `errno` it left.
///
/// This module is the one place that reads `errno`; everything above it sees this value.
public struct SystemError: Error, CustomStringConvertible, Sendable, Equatable {
    public let call: String
    public let errno: Int32

    public init(call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    /// The call named a path that does not exist (ENOENT): for callers to whom that is
    /// an answer ("nothing there yet"), not a failure.
    public var isMissing: Bool { errno == ENOENT }

    public var description: String {
        "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// Runs a system call that returns -1 on failure, retrying on EINTR (and only here).
@discardableResult
public func syscall(_ name: String, _ body: () -> Int32) throws(SystemError) -> Int32 {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(call: name, errno: code)
    }
}

@discardableResult
func syscall(_ name: String, _ body: () -> Int) throws(SystemError) -> Int {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(call: name, errno: code)
    }
}
