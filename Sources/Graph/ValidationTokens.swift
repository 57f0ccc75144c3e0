internal import Codecs
internal import ENSModel
public import OpenSSL

/// One signing key of the Microsoft identity platform's JWKS: an RSA key by `kid`.
public struct IdentityPlatformKey: Sendable, Equatable {
    public let kid: String
    public let modulus: [UInt8]
    public let exponent: [UInt8]

    public init(kid: String, modulus: [UInt8], exponent: [UInt8]) {
        self.kid = kid
        self.modulus = modulus
        self.exponent = exponent
    }

    /// A JWK with `kty` RSA, a `kid`, `n` and `e`; nil for any other (an encryption
    /// key, an EC key, a damaged entry).
    init?(jwk: JSONValue) {
        guard jwk["kty"]?.stringValue == "RSA", jwk["use"].map({ $0.stringValue == "sig" }) ?? true,
              let kid = jwk["kid"]?.stringValue, !kid.isEmpty, kid.utf8.count <= 128, kid.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
              let n = jwk["n"]?.stringValue.flatMap(Base64.decodeURLSafe), let e = jwk["e"]?.stringValue.flatMap(Base64.decodeURLSafe),
              !n.isEmpty, n.count <= 1024, !e.isEmpty, e.count <= 16 else { return nil }
        self.init(kid: kid, modulus: n, exponent: e)
    }
}

/// Why a batch's validation tokens do not prove that Microsoft Graph sent it. The
/// descriptions are log-safe: no token, claim value or key material.
public enum ValidationTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    case missing
    case malformed(String)
    /// Signed by a key (`kid`) not among the known ones: fetch the JWKS again.
    case unknownKey
    case badSignature
    case expired
    case notYetValid
    case wrongAudience
    case wrongCaller
    case wrongIssuer
    /// No token of the batch speaks for this tenant's application.
    case noTokenForTenant

    public var description: String {
        switch self {
        case .missing: "the batch carries no validation token"
        case .malformed(let problem): "a validation token is malformed (\(problem))"
        case .unknownKey: "a validation token is signed by an unknown key"
        case .badSignature: "a validation token's signature does not verify"
        case .expired: "a validation token has expired"
        case .notYetValid: "a validation token is not yet valid"
        case .wrongAudience: "a validation token is for another application"
        case .wrongCaller: "a validation token was not issued to Microsoft Graph Change Tracking"
        case .wrongIssuer: "a validation token was issued by another tenant"
        case .noTokenForTenant: "no validation token speaks for the notified tenant"
        }
    }
}

/// The `validationTokens` of a rich-notification batch (research/graph.md §4): JWTs the
/// Microsoft identity platform signed (RS256) for ENS's application in each tenant
/// whose notifications the batch carries. Every one must verify: signature by a key of
/// the platform's JWKS, `exp`/`nbf` within `skew`, `aud` an application ENS is in that
/// tenant, the caller (`azp` in v2.0 tokens, `appid` in v1.0) Microsoft Graph Change
/// Tracking, the issuer the token's tenant (`https://sts.windows.net/<tid>/` or
/// `<login>/<tid>/v2.0`); and each tenant notified must have one.
public struct ValidationTokens: Sendable {
    /// Microsoft Graph Change Tracking's application id: the only caller allowed.
    public static let changeTrackingAppID = "0bf30f3b-4a52-48df-9a82-234910c4a086"
    public static let maximumTokens = 16
    public static let maximumTokenBytes = 16 * 1024

    /// What a tenant's token must say: ENS's application id there.
    public struct Expectation: Sendable, Hashable {
        public let tenantID: String
        public let clientID: String

        public init(tenantID: String, clientID: String) {
            self.tenantID = tenantID.lowercased()
            self.clientID = clientID.lowercased()
        }
    }

    public let tokens: [String]

    public init(_ tokens: [String]) {
        self.tokens = tokens
    }

    /// Checks every token against the applications ENS has (`expectations`, one per
    /// tenant it serves), then that each tenant in `required` (those the batch notifies)
    /// has one. `key` gives the verifying key of a `kid`, nil when unknown; `loginURL`
    /// is the platform's base (for v2.0 issuers); `now` in seconds since the epoch.
    public func verify(expecting expectations: [Expectation], required: Set<String>, key: (String) -> RSAVerifyingKey?, loginURL: String,
                       now: Int64, skew: Int64 = 300) throws(ValidationTokenError) {
        guard !tokens.isEmpty else { throw .missing }
        var spoken: Set<String> = []
        for token in tokens {
            spoken.insert(try Self.verify(token, expectations: expectations, key: key, loginURL: loginURL, now: now, skew: skew).tenantID)
        }
        guard required.allSatisfy({ spoken.contains($0.lowercased()) }) else { throw .noTokenForTenant }
    }

    private static func verify(_ token: String, expectations: [Expectation], key: (String) -> RSAVerifyingKey?, loginURL: String,
                               now: Int64, skew: Int64) throws(ValidationTokenError) -> Expectation {
        guard token.utf8.count <= maximumTokenBytes else { throw .malformed("too long") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("not a compact JWS") }
        guard let headerBytes = Base64.decodeURLSafe(String(parts[0])), let header = try? JSONParser.parse(headerBytes),
              let claimBytes = Base64.decodeURLSafe(String(parts[1])), let claims = try? JSONParser.parse(claimBytes),
              let signature = Base64.decodeURLSafe(String(parts[2])) else { throw .malformed("undecodable parts") }
        guard header["alg"]?.stringValue == "RS256" else { throw .malformed("alg is not RS256") }
        guard let kid = header["kid"]?.stringValue, !kid.isEmpty else { throw .malformed("no kid") }
        guard let verifier = key(kid) else { throw .unknownKey }
        guard verifier.verifiesRS256(Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8), signature: signature) else {
            throw .badSignature
        }
        // Only now are the claims Microsoft's.
        guard let expires = claims["exp"]?.scalarText.flatMap(Int64.init) else { throw .malformed("no exp") }
        guard now < expires + skew else { throw .expired }
        if let member = claims["nbf"] {
            guard let notBefore = member.scalarText.flatMap(Int64.init) else { throw .malformed("nbf is not a number") }
            guard notBefore <= now + skew else { throw .notYetValid }
        }
        let caller = claims["azp"]?.stringValue ?? claims["appid"]?.stringValue
        guard caller?.lowercased() == changeTrackingAppID else { throw .wrongCaller }
        guard let audience = claims["aud"]?.stringValue?.lowercased() else { throw .wrongAudience }
        guard let issuer = claims["iss"]?.stringValue, let tenant = claims["tid"]?.stringValue?.lowercased() else { throw .wrongIssuer }
        guard issuer == "https://sts.windows.net/\(tenant)/" || issuer.lowercased() == "\(loginURL)/\(tenant)/v2.0".lowercased() else {
            throw .wrongIssuer
        }
        guard let expected = expectations.first(where: { $0.tenantID == tenant }) else { throw .wrongIssuer }
        guard expected.clientID == audience else { throw .wrongAudience }
        return expected
    }
}
