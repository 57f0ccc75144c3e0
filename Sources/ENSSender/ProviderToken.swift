public import OpenSSL
internal import ENSCore
internal import POSIX

/// The APNs provider token (an ES256 JWT) for one signing key. Minted once and shared
/// by every request and connection; re-minted after 50 minutes (Apple: no more often
/// than every 20, no less often than every 60) or when APNs answers
/// ExpiredProviderToken. Never minted per request.
public final class ProviderToken: @unchecked Sendable {
    // @unchecked: used only by the delivery thread.
    private let key: ECSigningKey
    private let keyID: String
    private let teamID: String
    private let now: () -> Int64
    private var current: (token: String, issuedAt: Int64)?
    public private(set) var mintCount = 0

    public static func wallClockSeconds() -> Int64 { WallClock.milliseconds() / 1000 }

    public static let refreshAfterSeconds: Int64 = 50 * 60
    public static let minimumAgeSeconds: Int64 = 20 * 60

    public init(key: ECSigningKey, keyID: String, teamID: String, now: @escaping () -> Int64 = ProviderToken.wallClockSeconds) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.now = now
    }

    /// The token to send now.
    public func token() throws -> String {
        if let current, now() - current.issuedAt < Self.refreshAfterSeconds { return current.token }
        return try mint()
    }

    /// APNs said the token expired: mint a new one, unless the current one is younger
    /// than 20 minutes (then re-minting would earn TooManyProviderTokenUpdates).
    public func expired() throws {
        if let current, now() - current.issuedAt < Self.minimumAgeSeconds { return }
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
        current = (token, issuedAt)
        mintCount += 1
        return token
    }
}
