internal import COpenSSL

/// An OpenSSL failure. Built in one place, `OpenSSLError.drain`, which empties the
/// thread's OpenSSL error queue so a stale entry never attaches to a later call.
///
/// The description names the operation and OpenSSL's reason codes; it never includes
/// key material or plaintext.
public struct OpenSSLError: Error, CustomStringConvertible, Sendable, Equatable {
    public let operation: String
    public let reasons: [String]

    public var description: String {
        reasons.isEmpty ? "OpenSSL \(operation) failed" : "OpenSSL \(operation) failed: \(reasons.joined(separator: "; "))"
    }

    /// Collects and clears the error queue for a failed `operation`.
    static func drain(_ operation: String) -> OpenSSLError {
        var reasons: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            reasons.append(buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        }
        return OpenSSLError(operation: operation, reasons: reasons)
    }

    /// Clears the queue without building an error (for expected failures such as a bad
    /// padding check, which must leave no trace that differs from success).
    static func clearQueue() {
        ERR_clear_error()
    }
}
