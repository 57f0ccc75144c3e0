import Synchronization

/// Application access tokens per tenant, shared by every thread of a process: one
/// token serves every request to a tenant until five minutes before it expires, so
/// the token endpoint is asked about once an hour per tenant and process.
public final class GraphAppTokens: Sendable {
    /// A token is renewed this long before the identity platform says it expires.
    static let renewalMargin: Int64 = 300_000

    private let tokens = Mutex<[String: (token: String, expiresAt: Int64)]>([:])

    public init() {}

    /// The tenant's token, if one is held that is good for more than the margin.
    func cached(tenantID: String, nowMilliseconds: Int64) -> String? {
        tokens.withLock { tokens in
            guard let held = tokens[tenantID], held.expiresAt - Self.renewalMargin > nowMilliseconds else { return nil }
            return held.token
        }
    }

    func store(tenantID: String, token: String, expiresAt: Int64) {
        tokens.withLock { $0[tenantID] = (token, expiresAt) }
    }

    /// Graph refused the token (revoked, or a tenant's consent changed): the next
    /// request fetches a new one.
    func forget(tenantID: String) {
        _ = tokens.withLock { $0.removeValue(forKey: tenantID) }
    }
}
