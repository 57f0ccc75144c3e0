@testable import ENSModel
import ENSTestSupport
import Codecs
import Foundation
@testable import Graph
import OpenSSL
import Testing

/// The validation tokens of rich notifications, checked against JWTs signed by Python's
/// `cryptography` (an independent RS256 and JWK implementation): what Microsoft's
/// identity platform sends passes, and each way a forger or a misconfiguration can get
/// a claim wrong fails with its own reason.
@Suite struct ValidationTokenTests {
    static let tenant = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001"
    static let otherTenant = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0002"
    static let app = "0e5a1c2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"
    static let login = "https://login.example.test"

    /// A signing key made in Python: signs claim sets and gives its JWK.
    struct PythonIssuer {
        let directory: URL
        var keyPath: String { directory.appendingPathComponent("issuer.pem").path }

        init(in directory: URL) throws {
            self.directory = directory
            _ = try Shell.python("""
                import sys
                from cryptography.hazmat.primitives import serialization
                from cryptography.hazmat.primitives.asymmetric import rsa
                key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                open(sys.argv[1],
                     'wb').write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
                """, [directory.appendingPathComponent("issuer.pem").path])
        }

        /// {"kid", "n", "e"} of the key, base64url as a JWKS has them.
        func jwk(kid: String) throws -> IdentityPlatformKey {
            let output = try Shell.python("""
                import sys, json, base64
                from cryptography.hazmat.primitives import serialization
                key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), None).public_key().public_numbers()
                b = lambda i: base64.urlsafe_b64encode(i.to_bytes((i.bit_length() + 7) // 8, 'big')).rstrip(b'=').decode()
                print(json.dumps({"kty": "RSA", "use": "sig", "kid": sys.argv[2], "n": b(key.n), "e": b(key.e)}))
                """, [keyPath, kid])
            return try #require(IdentityPlatformKey(jwk: try JSONParser.parse(Array(output.utf8))))
        }

        /// A compact JWS of `claims` with `header`, RS256 under this key (or, with
        /// `corrupt`, a signature with one byte changed).
        func token(_ claims: [String: Any], header: [String: Any] = ["typ": "JWT", "alg": "RS256", "kid": "k1"],
                   corrupt: Bool = false) throws -> String {
            let claimsJSON = String(decoding: try JSONSerialization.data(withJSONObject: claims), as: UTF8.self)
            let headerJSON = String(decoding: try JSONSerialization.data(withJSONObject: header), as: UTF8.self)
            return try Shell.python("""
                import sys, base64
                from cryptography.hazmat.primitives import hashes, serialization
                from cryptography.hazmat.primitives.asymmetric import padding
                key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), None)
                b = lambda data: base64.urlsafe_b64encode(data).rstrip(b'=').decode()
                signing_input = b(sys.argv[2].encode()) + '.' + b(sys.argv[3].encode())
                signature = bytearray(key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()))
                if sys.argv[4] == '1': signature[10] ^= 1
                print(signing_input + '.' + b(bytes(signature)))
                """, [keyPath, headerJSON, claimsJSON, corrupt ? "1" : "0"])
        }
    }

    static func claims(now: Int64, version: String = "1.0", tenant: String = tenant) -> [String: Any] {
        var claims: [String: Any] = ["aud": app, "iat": now, "nbf": now, "exp": now + 3600, "tid": tenant, "ver": version]
        if version == "1.0" {
            claims["iss"] = "https://sts.windows.net/\(tenant)/"
            claims["appid"] = ValidationTokens.changeTrackingAppID
        } else {
            claims["iss"] = "\(login)/\(tenant)/v2.0"
            claims["azp"] = ValidationTokens.changeTrackingAppID
        }
        return claims
    }

    func verify(_ tokens: [String], key: IdentityPlatformKey, required: Set<String> = [tenant], now: Int64) throws(ValidationTokenError) {
        let verifier = try? RSAVerifyingKey(modulus: key.modulus, exponent: key.exponent)
        try ValidationTokens(tokens).verify(
            expecting: [.init(tenantID: Self.tenant, clientID: Self.app), .init(tenantID: Self.otherTenant, clientID: Self.app)],
            required: required, key: { $0 == key.kid ? verifier : nil }, loginURL: Self.login, now: now)
    }

    func outcome(_ tokens: [String], key: IdentityPlatformKey, required: Set<String> = [tenant], now: Int64) -> ValidationTokenError? {
        do {
            try verify(tokens, key: key, required: required, now: now)
            return nil
        } catch {
            return error
        }
    }

    @Test func genuineTokensOfBothVersionsPass() throws {
        try withTemporaryDirectory { directory in
            let issuer = try PythonIssuer(in: directory)
            let key = try issuer.jwk(kid: "k1")
            let now = Int64(Date().timeIntervalSince1970)
            #expect(outcome([try issuer.token(Self.claims(now: now))], key: key, now: now) == nil)
            #expect(outcome([try issuer.token(Self.claims(now: now, version: "2.0"))], key: key, now: now) == nil)
            // One token per tenant of the batch.
            let both = [try issuer.token(Self.claims(now: now)), try issuer.token(Self.claims(now: now, tenant: Self.otherTenant))]
            #expect(outcome(both, key: key, required: [Self.tenant, Self.otherTenant], now: now) == nil)
        }
    }

    @Test func eachForgeryFailsForItsOwnReason() throws {
        try withTemporaryDirectory { directory in
            let issuer = try PythonIssuer(in: directory)
            let key = try issuer.jwk(kid: "k1")
            let now = Int64(Date().timeIntervalSince1970)
            func with(_ change: (inout [String: Any]) -> Void) throws -> [String] {
                var claims = Self.claims(now: now)
                change(&claims)
                return [try issuer.token(claims)]
            }
            #expect(outcome([], key: key, now: now) == .missing)
            #expect(outcome([try issuer.token(Self.claims(now: now), corrupt: true)], key: key, now: now) == .badSignature)
            #expect(outcome([try issuer.token(Self.claims(now: now), header: ["alg": "RS256", "kid": "k2"])], key: key, now: now) == .unknownKey)
            #expect(outcome([try issuer.token(Self.claims(now: now), header: ["alg": "none", "kid": "k1"])], key: key, now: now)
                        == .malformed("alg is not RS256"))
            #expect(outcome(try with { $0["exp"] = now - 400 }, key: key, now: now) == .expired)
            #expect(outcome(try with { $0["nbf"] = now + 400 }, key: key, now: now) == .notYetValid)
            #expect(outcome(try with { $0["aud"] = "11111111-2222-3333-4444-555555555555" }, key: key, now: now) == .wrongAudience)
            #expect(outcome(try with { $0["appid"] = "11111111-2222-3333-4444-555555555555" }, key: key, now: now) == .wrongCaller)
            #expect(outcome(try with { $0["appid"] = nil }, key: key, now: now) == .wrongCaller)
            #expect(outcome(try with { $0["iss"] = "https://sts.windows.net/\(Self.otherTenant)/" }, key: key, now: now) == .wrongIssuer)
            #expect(outcome(try with {
                                $0["tid"] = "99999999-0c55-4d7e-9d1e-5c0a3a7e0001"
                                $0["iss"] = "https://sts.windows.net/99999999-0c55-4d7e-9d1e-5c0a3a7e0001/"
                            },
                            key: key, now: now) == .wrongIssuer, "a tenant ENS does not serve")
            // A genuine token of the other tenant does not speak for this one.
            #expect(outcome([try issuer.token(Self.claims(now: now, tenant: Self.otherTenant))], key: key, now: now) == .noTokenForTenant)
            // Within the skew a token still counts; past it not.
            #expect(outcome(try with { $0["exp"] = now - 200 }, key: key, now: now) == nil)
            #expect(outcome(["a.b"], key: key, now: now) == .malformed("not a compact JWS"))
        }
    }

    @Test func aJWKThatIsNoRSASigningKeyIsSkipped() throws {
        #expect(IdentityPlatformKey(jwk: try JSONParser.parse(Array(#"{"kty":"EC","kid":"x","crv":"P-256","x":"AA","y":"AA"}"#.utf8))) == nil)
        #expect(IdentityPlatformKey(jwk: try JSONParser.parse(Array(#"{"kty":"RSA","use":"enc","kid":"x","n":"AQAB","e":"AQAB"}"#.utf8))) == nil)
        #expect(IdentityPlatformKey(jwk: try JSONParser.parse(Array(#"{"kty":"RSA","kid":"","n":"AQAB","e":"AQAB"}"#.utf8))) == nil)
        // A key too short to trust is refused where it is built.
        #expect((try? RSAVerifyingKey(modulus: [UInt8](repeating: 0xC1, count: 128), exponent: [1, 0, 1])) == nil)
    }

    @Test func aBatchReadsEncryptedItemsAndItsTokens() throws {
        let body = #"""
            {"validationTokens": ["t1", null],
             "value": [{"subscriptionId": "s1", "clientState": "c", "changeType": "created", "resource": "Users/u/Messages/m1",
                        "resourceData": {"id": "m1"},
                        "encryptedContent": {"data": "QUJD", "dataKey": "S0VZ", "dataSignature": "U0lH",
                                             "encryptionCertificateId": "cert-1",
                                             "encryptionCertificateThumbprint": "07293748CC064953A3052FB978C735FB89E61C3D"}},
                       {"subscriptionId": "s1", "clientState": "c", "changeType": "created", "resourceData": {"id": "m2"},
                        "encryptedContent": {"data": "not base64!", "dataKey": "S0VZ", "dataSignature": "U0lH",
                                             "encryptionCertificateId": "cert-1", "encryptionCertificateThumbprint": "AB"}}]}
            """#
        let batch = try ChangeNotificationBatch(json: Array(body.utf8))
        #expect(batch.validationTokens == ["t1"] && batch.hasUnusableToken, "a null token makes the batch unusable")
        #expect(batch.unreadable == 1, "content that is not what Graph documents is unreadable")
        guard case .encrypted(let subscription, _, let message, let content)? = batch.items.first else {
            Issue.record("not an encrypted item: \(batch.items)")
            return
        }
        #expect(subscription == "s1" && message == "m1" && content.certificateID == "cert-1" && content.data == "QUJD")
        let plain = try ChangeNotificationBatch(json: Array(#"{"value": []}"#.utf8))
        #expect(plain.validationTokens == nil && !plain.hasUnusableToken)
        #expect(throws: ChangeNotificationBatch.Malformed.self) {
            try ChangeNotificationBatch(json: Array(#"{"value": [], "validationTokens": "x"}"#.utf8))
        }
    }
}
