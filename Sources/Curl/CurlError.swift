internal import CCurl

/// A failed transfer, translated in one place from `CURLcode` and the error buffer.
/// The URL is not part of the description: callback URLs carry sealed credentials.
public struct CurlError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable, Equatable {
        case couldNotConnect, timedOut, tlsFailure, other
        /// Refused before any I/O or before connecting: a destination the
        /// `DestinationPolicy` does not permit, a header with control characters, a
        /// budget already spent.
        case destinationRefused, invalidRequest, budgetExhausted
        /// The response body grew past the limit while downloading; the transfer was cut.
        case responseTooLarge
        /// IMAP: the server refused the login (wrong password, or no such account).
        case loginDenied
        /// IMAP: the server answered NO or BAD to the command (`detail` says which).
        case commandRefused
    }

    public let kind: Kind
    public let code: Int32
    public let detail: String

    init(_ kind: Kind, detail: String) {
        self.kind = kind
        code = Int32(CURLE_ABORTED_BY_CALLBACK.rawValue)
        self.detail = detail
    }

    init(code: CURLcode, detail: String) {
        self.code = Int32(code.rawValue)
        self.detail = detail
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING:
            kind = .couldNotConnect
        case CURLE_OPERATION_TIMEDOUT:
            kind = .timedOut
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_USE_SSL_FAILED:
            kind = .tlsFailure
        case CURLE_LOGIN_DENIED:
            kind = .loginDenied
        case CURLE_QUOTE_ERROR:
            kind = .commandRefused
        default:
            kind = .other
        }
    }

    /// Worth retrying later (the peer was unreachable or slow), as opposed to a
    /// configuration or certificate problem that will fail the same way again.
    public var isRetriable: Bool { kind == .couldNotConnect || kind == .timedOut }

    public var description: String {
        switch kind {
        case .destinationRefused: return "destination not allowed: \(detail)"
        case .invalidRequest: return "request refused: \(detail)"
        case .budgetExhausted: return "time budget spent: \(detail)"
        case .responseTooLarge: return "response too large: \(detail)"
        default: break
        }
        let text = String(cString: curl_easy_strerror(CURLcode(UInt32(code))))
        return detail.isEmpty ? "curl error \(code): \(text)" : "curl error \(code): \(text) (\(detail))"
    }
}

enum CurlLibrary {
    /// curl_global_init is not thread-safe; run it once, before any handle exists.
    static let initialized: Bool = ccurl_global_init_default() == CURLE_OK
}
