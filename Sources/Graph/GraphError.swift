internal import POSIX

/// A Microsoft Graph or identity-platform failure. Descriptions are log-safe: statuses
/// and Graph's error codes, never bodies, tokens, addresses or URLs.
public enum GraphError: Error, Sendable, Equatable, CustomStringConvertible {
    /// 401 or 403: the token was refused, or the application may not reach this mailbox.
    case unauthorized(status: Int, code: String)
    /// 404: the subscription, user or message does not exist (or no longer).
    case notFound(code: String)
    /// 409 on creating a subscription: one with the same resource and change type exists.
    case conflict
    /// 429 or 503 with Retry-After: come back after that long.
    case throttled(retryAfter: Duration)
    /// Another HTTP status, with Graph's error code if the body had one.
    case status(Int, code: String)
    /// The token endpoint refused ENS's application (its `error` and the AADSTS number).
    case tokenRefused(String)
    /// No HTTP answer: DNS, connect, TLS or timeout (libcurl's reason).
    case transport(String)
    /// A 2xx answer that is not what Graph documents.
    case malformed(String)

    public var description: String {
        switch self {
        case .unauthorized(let status, let code): "Graph refused the request (HTTP \(status) \(code))"
        case .notFound(let code): "Graph: not found (\(code))"
        case .conflict: "Graph: a subscription for this resource already exists (HTTP 409)"
        case .throttled(let retryAfter): "Graph throttled the request (retry after \(retryAfter.wholeSeconds) s)"
        case .status(let status, let code): "Graph answered HTTP \(status) \(code)"
        case .tokenRefused(let reason): "the token endpoint refused ENS's application: \(reason)"
        case .transport(let reason): "Graph unreachable: \(reason)"
        case .malformed(let reason): "unexpected Graph answer: \(reason)"
        }
    }
}
