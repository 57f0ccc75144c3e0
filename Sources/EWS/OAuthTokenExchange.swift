internal import Curl
internal import Codecs
public import ENSModel

/// Why an access token could not be renewed. Descriptions are log-safe: OAuth error
/// codes and HTTP statuses, never a token, a body or the endpoint's own description
/// (it may quote the request).
public enum OAuthRefreshError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The identity provider said no to this refresh token (RFC 6749 §5.2:
    /// invalid_grant, invalid_client, ...), or the outbound policy refuses its endpoint:
    /// asking again with the same grant cannot help.
    case refused(String)
    /// No usable answer this time (unreachable, slow, 5xx, 429, a malformed or
    /// oversized answer): the next callback may try again.
    case unavailable(String)

    public var description: String {
        switch self {
        case .refused(let reason): "the token endpoint refused the refresh token (\(reason))"
        case .unavailable(let reason): "the token endpoint gave no usable answer (\(reason))"
        }
    }
}

extension EWSClient {
    /// Token endpoint requests never share a connection with a mailbox's requests.
    static let tokenEndpointConnection: [UInt8] = [2]
    /// A lifetime past this is not believed (a hostile endpoint could otherwise make ENS
    /// skip refreshes for years); 0 or less, or not a number, means unknown.
    static let maximumTokenLifetime: Int64 = 30 * 24 * 3600

    /// Exchanges `refresh`'s refresh token at its token endpoint (RFC 6749 §6, a public
    /// client: `client_id` in the body, no secret) for a new access token, within the
    /// budget under way (`withDeadline`) and the same outbound policy as Exchange's. The
    /// answer's refresh token replaces the old one when the provider rotates it, and its
    /// `expires_in` (on this server's clock) becomes the new expiry.
    public func refreshAccessToken(_ refresh: OAuthRefresh,
                                   now: Timestamp = .now()) throws(OAuthRefreshError) -> (accessToken: String, refresh: OAuthRefresh) {
        // Checked when the device handed it over; checked again, as a refresh token must
        // never travel in the clear.
        guard URLParts(refresh.tokenEndpoint)?.scheme == "https" else { throw .refused("not sent: the token endpoint is not https") }
        var fields = [("grant_type", "refresh_token"), ("refresh_token", refresh.refreshToken), ("client_id", refresh.clientID)]
        if let scope = refresh.scope { fields.append(("scope", scope)) }
        let response: HTTPResponse
        do {
            response = try http.send(HTTPRequest(
                method: .post, url: refresh.tokenEndpoint,
                headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"), ("User-Agent", "ENS/1")],
                body: PercentEncoding.form(fields), connectionKey: Self.tokenEndpointConnection
            ), deadline: deadline)
        } catch {
            switch error.kind {
            case .destinationRefused, .invalidRequest: throw .refused("not sent: \(error.detail)")
            default: throw .unavailable(error.description)
            }
        }
        return try Self.tokens(from: response, refreshing: refresh, now: now)
    }

    /// Reads a token endpoint's answer (RFC 6749 §5.1 and §5.2).
    static func tokens(from response: HTTPResponse, refreshing refresh: OAuthRefresh,
                       now: Timestamp) throws(OAuthRefreshError) -> (accessToken: String, refresh: OAuthRefresh) {
        let body = try? JSONParser.parse(response.body, maximumDepth: 4)
        guard response.status == 200 else {
            let code = body?["error"]?.stringValue.flatMap(errorCode) ?? "HTTP \(response.status)"
            // A refusal names the grant or the client; anything else (5xx, 429, a
            // "temporarily_unavailable") may pass.
            let permanent = (response.status == 400 || response.status == 401) && !["temporarily_unavailable", "server_error"].contains(code)
            throw permanent ? .refused(code) : .unavailable(code)
        }
        guard let body, case .object = body else { throw .unavailable("the answer is not a JSON object") }
        guard let accessToken = body["access_token"]?.stringValue, isTokenText(accessToken) else {
            throw .unavailable("the answer has no usable access_token")
        }
        guard body["token_type"]?.stringValue?.lowercased() == "bearer" else { throw .unavailable("the token_type is not Bearer") }
        var renewed = refresh
        if let rotated = body["refresh_token"] {
            guard let token = rotated.stringValue, isTokenText(token) else { throw .unavailable("the answer's refresh_token is not usable") }
            renewed.refreshToken = token
        }
        renewed.accessTokenExpiresAt = body["expires_in"]?.scalarText.flatMap { Int64($0) }
            .flatMap { $0 > 0 ? now.adding(seconds: min($0, maximumTokenLifetime)) : nil }
        return (accessToken, renewed)
    }

    /// A token ENS can store and send in a header: 1...16 KiB of visible ASCII.
    static func isTokenText(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= OAuthRefresh.maximumTokenBytes && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// An OAuth error code as RFC 6749 allows it (%x20-21 / %x23-5B / %x5D-7E), short;
    /// anything else is not repeated into the log.
    static func errorCode(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= 64, text.utf8.allSatisfy({ $0 == 0x5F || ($0 >= 0x61 && $0 <= 0x7A) }) else { return nil }
        return text
    }
}
