/// What lets ENS renew a user's OAuth access token on its own (docs/exchange.md,
/// "OAuth refresh"): the refresh token a device handed over, where to exchange it and as
/// which client. Kept only inside a subscription's sealed credentials, never logged or
/// described (`description` names nothing).
public struct OAuthRefresh: Sendable, Equatable, CustomStringConvertible {
    /// Replaced by the rotated one after each exchange.
    public var refreshToken: String
    /// An https URL (checked when the device hands it over, and against the outbound
    /// policy at each exchange).
    public let tokenEndpoint: String
    public let clientID: String
    /// The scopes to ask for; nil asks for those of the original grant.
    public let scope: String?
    /// When the access token beside it expires, if known (the token endpoint's
    /// `expires_in`, on this server's clock): a callback past it refreshes before its
    /// first lookup instead of after a 401.
    public var accessTokenExpiresAt: Timestamp?

    public init(refreshToken: String, tokenEndpoint: String, clientID: String, scope: String? = nil, accessTokenExpiresAt: Timestamp? = nil) {
        self.refreshToken = refreshToken
        self.tokenEndpoint = tokenEndpoint
        self.clientID = clientID
        self.scope = scope
        self.accessTokenExpiresAt = accessTokenExpiresAt
    }

    public var description: String { "OAuthRefresh" }

    /// Field limits for what a device hands over: generous for real identity providers
    /// (Azure AD refresh tokens are ~1-2 KiB), small enough for the sealed `creds`.
    public static let maximumTokenBytes = 16 * 1024
    public static let maximumFieldBytes = 2048
}
