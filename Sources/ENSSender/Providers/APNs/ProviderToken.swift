internal import Codecs
public import OpenSSL
internal import ENSModel
internal import POSIX

/// The APNs provider token (an ES256 JWT) for one signing key. Minted once and shared
/// by every request and connection; re-minted after 50 minutes (Apple: no more often
/// than every 20, no less often than every 60) or when APNs answers
/// ExpiredProviderToken. Never minted per request.
public final class ProviderToken: Sendable {
    private let key: ECSigningKey
    private let keyID: String
    private let teamID: String
    private let now: @Sendable () -> Int64
    /// The token in use and how many were minted: the delivery thread's alone.
    private let state = ThreadConfined<(current: (token: String, issuedAt: Int64)?, mintCount: Int)>((nil, 0))

    public var mintCount: Int { state.withValue { $0.mintCount } }

    public static func wallClockSeconds() -> Int64 { WallClock.milliseconds() / 1000 }

    public static let refreshAfterSeconds: Int64 = 50 * 60
    public static let minimumAgeSeconds: Int64 = 20 * 60

    public init(key: ECSigningKey, keyID: String, teamID: String, now: @escaping @Sendable () -> Int64 = ProviderToken.wallClockSeconds) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.now = now
    }

    /// The token to send now.
    public func token() throws -> String {
        if let current = state.withValue({ $0.current }), now() - current.issuedAt < Self.refreshAfterSeconds { return current.token }
        return try mint()
    }

    /// APNs said the token expired: mint a new one, unless the current one is younger
    /// than 20 minutes (then re-minting would earn TooManyProviderTokenUpdates).
    public func expired() throws {
        if let current = state.withValue({ $0.current }), now() - current.issuedAt < Self.minimumAgeSeconds { return }
        _ = try mint()
    }

    private func mint() throws -> String {
        let issuedAt = now()
        var header = JSONObjectWriter()
        header.add("alg", "ES256")
        header.add("kid", keyID)
        var claims = JSONObjectWriter()
        claims.add("iss", teamID)
        claims.add("iat", Int(issuedAt))
        let signingInput = Base64.encodeURLSafe(header.finished()) + "." + Base64.encodeURLSafe(claims.finished())
        let signature = try key.signES256(Array(signingInput.utf8))
        let token = signingInput + "." + Base64.encodeURLSafe(signature)
        state.withValue { state in
            state.current = (token, issuedAt)
            state.mintCount += 1
        }
        return token
    }
}
