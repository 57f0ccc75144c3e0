import ENSTestSupport
import Codecs
import OpenSSL
import Testing
@testable import ENSSender

/// A clock the test moves by hand.
final class ManualClock: @unchecked Sendable {
    var seconds: Int64

    init(_ seconds: Int64) { self.seconds = seconds }

    func advance(_ delta: Int64) { seconds += delta }
}

@Suite struct ProviderTokenTests {
    static let keyID = "ABC123DEFG"
    static let teamID = "DEF123GHIJ"
    static let start: Int64 = 1_700_000_000
    static let key: ECSigningKey = try! ECSigningKey.generate()

    static func make(_ clock: ManualClock, key: ECSigningKey = key, keyID: String = keyID, teamID: String = teamID) -> ProviderToken {
        ProviderToken(key: key, keyID: keyID, teamID: teamID, now: { clock.seconds })
    }

    /// Verifies a JWT with Python's `cryptography`, independently of ENS: three
    /// base64url parts without padding (canonical), a 64-byte raw r ‖ s signature over
    /// "header.claims" under the given public key. Prints the header and the claims as
    /// decoded text on two lines, or `invalid-signature`.
    static let pythonVerifyJWT = """
        import base64, sys
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
        token, pem = sys.argv[1], sys.argv[2]
        parts = token.split('.')
        assert len(parts) == 3, 'not three parts'
        alphabet = set('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_')
        def decode(part):
            assert part and set(part) <= alphabet, 'not base64url without padding: ' + part
            raw = base64.urlsafe_b64decode(part + '=' * (-len(part) % 4))
            assert base64.urlsafe_b64encode(raw).decode().rstrip('=') == part, 'not canonical'
            return raw
        header, claims, signature = (decode(part) for part in parts)
        assert len(signature) == 64, 'signature is %d bytes' % len(signature)
        key = serialization.load_pem_public_key(pem.encode())
        assert isinstance(key.curve, ec.SECP256R1)
        der = encode_dss_signature(int.from_bytes(signature[:32], 'big'), int.from_bytes(signature[32:], 'big'))
        try:
            key.verify(der, (parts[0] + '.' + parts[1]).encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            print('invalid-signature')
            sys.exit(0)
        print(header.decode())
        print(claims.decode())
        """

    static func verify(_ token: String, key: ECSigningKey = key) throws -> [String] {
        try Shell.python(pythonVerifyJWT, [token, try key.publicKeyPEM]).split(separator: "\n").map(String.init)
    }

    // MARK: Reuse and refresh

    @Test func tokenIsReusedForFiftyMinutes() throws {
        let clock = ManualClock(Self.start)
        let provider = Self.make(clock)
        #expect(provider.mintCount == 0)
        let first = try provider.token()
        #expect(provider.mintCount == 1)
        for delta: Int64 in [0, 1, 60, 20 * 60, 49 * 60, 50 * 60 - 1] {
            clock.seconds = Self.start + delta
            #expect(try provider.token() == first, "after \(delta) s")
        }
        #expect(provider.mintCount == 1)
        clock.seconds = Self.start + 50 * 60
        let second = try provider.token()
        #expect(second != first)
        #expect(provider.mintCount == 2)
        #expect(try Self.verify(second).last == #"{"iss":"\#(Self.teamID)","iat":\#(Self.start + 50 * 60)}"#)
        // The new token is reused in turn, for 50 minutes from its own issue time.
        clock.advance(50 * 60 - 1)
        #expect(try provider.token() == second)
        clock.advance(1)
        #expect(try provider.token() != second)
        #expect(provider.mintCount == 3)
    }

    @Test func expiredDoesNotReMintAYoungToken() throws {
        let clock = ManualClock(Self.start)
        let provider = Self.make(clock)
        let first = try provider.token()
        for delta: Int64 in [0, 1, 10 * 60, 20 * 60 - 1] {
            clock.seconds = Self.start + delta
            try provider.expired()
            #expect(provider.mintCount == 1, "after \(delta) s")
            #expect(try provider.token() == first)
        }
    }

    @Test func expiredReMintsAnOlderToken() throws {
        let clock = ManualClock(Self.start)
        let provider = Self.make(clock)
        let first = try provider.token()
        clock.seconds = Self.start + 20 * 60
        try provider.expired()
        #expect(provider.mintCount == 2)
        let second = try provider.token()
        #expect(second != first)
        #expect(provider.mintCount == 2)
        #expect(try Self.verify(second).last == #"{"iss":"\#(Self.teamID)","iat":\#(Self.start + 20 * 60)}"#)
        // The fresh token is young again: another ExpiredProviderToken right away does
        // not re-mint.
        clock.advance(5)
        try provider.expired()
        #expect(provider.mintCount == 2)
        #expect(try provider.token() == second)
    }

    @Test func expiredWithoutATokenMints() throws {
        let clock = ManualClock(Self.start)
        let provider = Self.make(clock)
        try provider.expired()
        #expect(provider.mintCount == 1)
        _ = try provider.token()
        #expect(provider.mintCount == 1)
    }

    @Test func clockGoingBackwardsKeepsTheToken() throws {
        let clock = ManualClock(Self.start)
        let provider = Self.make(clock)
        let first = try provider.token()
        clock.seconds = Self.start - 3600
        #expect(try provider.token() == first)
        try provider.expired()
        #expect(provider.mintCount == 1)
    }

    // MARK: The JWT, checked independently

    @Test func jwtVerifiesWithPython() throws {
        let clock = ManualClock(1_712_345_678)
        let provider = Self.make(clock)
        let token = try provider.token()
        let lines = try Self.verify(token)
        #expect(lines.count == 2)
        #expect(lines.first == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(lines.last == #"{"iss":"DEF123GHIJ","iat":1712345678}"#)
        #expect(!token.contains("=") && !token.contains("+") && !token.contains("/"))
        #expect(token.split(separator: ".").count == 3)
        #expect(token.split(separator: ".").last?.count == 86)  // 64 bytes, base64url without padding
    }

    @Test func jwtDoesNotVerifyUnderAnotherKeyOrWhenAltered() throws {
        let clock = ManualClock(Self.start)
        let token = try Self.make(clock).token()
        #expect(try Self.verify(token, key: try ECSigningKey.generate()) == ["invalid-signature"])
        // Swap in other claims, keeping the signature.
        let parts = token.split(separator: ".").map(String.init)
        let otherClaims = Base64.encodeURLSafe(Array(#"{"iss":"DEF123GHIJ","iat":1700000001}"#.utf8))
        #expect(try Self.verify([parts[0], otherClaims, parts[2]].joined(separator: ".")) == ["invalid-signature"])
    }

    @Test func manyTokensVerify() throws {
        // Different times give different base64 lengths and padding; every one must be
        // canonical base64url and verify.
        // Claims of 43, 47, 51 and 52 bytes: every base64 remainder.
        for seconds: Int64 in [0, 99_999, 999_999_999, Int64(Int32.max)] {
            let provider = Self.make(ManualClock(seconds), keyID: "K", teamID: "TEAM-with-long-identifier")
            let lines = try Self.verify(try provider.token())
            #expect(lines == [#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"TEAM-with-long-identifier","iat":\#(seconds)}"#])
        }
    }

    @Test func base64URLEncoding() {
        #expect(Base64.encodeURLSafe([]) == "")
        #expect(Base64.encodeURLSafe([0xFB, 0xFF]) == "-_8")
        #expect(Base64.encodeURLSafe([0xFF]) == "_w")
        #expect(Base64.encodeURLSafe(Array("ab".utf8)) == "YWI")
        #expect(Base64.encodeURLSafe(Array("abc".utf8)) == "YWJj")
        #expect(Base64.encodeURLSafe([0x3E, 0x3F]) == "Pj8")
    }
}
