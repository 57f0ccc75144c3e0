import ENSTestSupport
@testable import Curl
@testable import ENSModel
@testable import EWS
import POSIX
import Testing

/// Reading a token endpoint's answer (RFC 6749 §5) strictly, and what is never sent.
/// The exchange itself, against the strict token-endpoint simulator, is in
/// IntegrationTests/OAuthRefreshTests.
struct OAuthTokenExchangeTests {
    static let refresh = OAuthRefresh(refreshToken: "rt.old", tokenEndpoint: "https://login.example.test/common/oauth2/v2.0/token", clientID: "app")
    static let now = Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)

    static func answer(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, httpMajorVersion: 1, headers: [("Content-Type", "application/json")], body: Array(body.utf8))
    }

    static func read(_ status: Int, _ body: String) throws(OAuthRefreshError) -> (accessToken: String, refresh: OAuthRefresh) {
        try EWSClient.tokens(from: answer(status, body), refreshing: refresh, now: now)
    }

    @Test func aRotatedRefreshTokenAndTheExpiryAreTaken() throws {
        let (token, renewed) = try Self.read(200,
            #"{"token_type":"Bearer","access_token":"eyJ.new","expires_in":3599,"refresh_token":"rt.new","scope":"x"}"#)
        #expect(token == "eyJ.new")
        #expect(renewed.refreshToken == "rt.new")
        #expect(renewed.accessTokenExpiresAt == Self.now.adding(seconds: 3599))
        #expect(renewed.tokenEndpoint == Self.refresh.tokenEndpoint && renewed.clientID == "app")
    }

    @Test func withoutRotationTheRefreshTokenStaysAndAnUnknownLifetimeIsNil() throws {
        let (_, kept) = try Self.read(200, #"{"token_type":"bearer","access_token":"a"}"#)
        #expect(kept.refreshToken == "rt.old" && kept.accessTokenExpiresAt == nil)
        // A string lifetime (some providers) counts; an absurd one is capped at 30 days.
        let (_, text) = try Self.read(200, #"{"token_type":"Bearer","access_token":"a","expires_in":"600"}"#)
        #expect(text.accessTokenExpiresAt == Self.now.adding(seconds: 600))
        let (_, capped) = try Self.read(200, #"{"token_type":"Bearer","access_token":"a","expires_in":99999999999}"#)
        #expect(capped.accessTokenExpiresAt == Self.now.adding(seconds: 30 * 24 * 3600))
        let (_, negative) = try Self.read(200, #"{"token_type":"Bearer","access_token":"a","expires_in":-5}"#)
        #expect(negative.accessTokenExpiresAt == nil)
    }

    /// The provider said no: asking again cannot help.
    @Test(arguments: [
        (400, #"{"error":"invalid_grant","error_description":"AADSTS70008: expired"}"#, "invalid_grant"),
        (401, #"{"error":"invalid_client"}"#, "invalid_client"),
        (400, #"{"error":"unsupported_grant_type"}"#, "unsupported_grant_type"),
        (400, "<html>no</html>", "HTTP 400"),
        (400, #"{"error":"rt.old leaked\r\n"}"#, "HTTP 400"),
    ])
    func refusals(status: Int, body: String, code: String) {
        #expect(throws: OAuthRefreshError.refused(code)) { try Self.read(status, body) }
    }

    /// Nothing usable this time; the next callback may try again.
    @Test(arguments: [
        (503, #"{"error":"temporarily_unavailable"}"#),
        (429, ""),
        (500, "oops"),
        (400, #"{"error":"temporarily_unavailable"}"#),
        (200, "not json"),
        (200, "[1]"),
        (200, #"{"token_type":"Bearer"}"#),
        (200, #"{"token_type":"mac","access_token":"a"}"#),
        (200, #"{"token_type":"Bearer","access_token":""}"#),
        (200, #"{"token_type":"Bearer","access_token":"a\r\nX-Evil: 1"}"#),
        (200, #"{"token_type":"Bearer","access_token":"a","refresh_token":7}"#),
        (200, #"{"token_type":"Bearer","access_token":"a","access_token":"b"}"#),
    ])
    func failuresThatMayPass(status: Int, body: String) {
        #expect {
            try Self.read(status, body)
        } throws: { error in
            guard case .unavailable = error as? OAuthRefreshError else { return false }
            return true
        }
    }

    @Test func anOversizedTokenIsNotTaken() {
        let huge = String(repeating: "a", count: OAuthRefresh.maximumTokenBytes + 1)
        #expect(throws: OAuthRefreshError.self) { try Self.read(200, #"{"token_type":"Bearer","access_token":"\#(huge)"}"#) }
    }

    /// No refresh token leaves over plain http, to a non-default port, or to an address
    /// the outbound policy refuses (here: loopback, with no network allowed); no
    /// connection is made, so the answer is a refusal at once.
    @Test(arguments: [
        "http://login.example.test/token",
        "https://login.example.test:8443/token",
        "https://127.0.0.2/token",
        "https://user@login.example.test/token",
    ])
    func endpointsThePolicyRefusesGetNothing(endpoint: String) throws {
        let client = try EWSClient(configuration: EWSClientConfiguration(
            connectTo: ["login.example.test:443:127.0.0.3:443"], connectTimeout: .milliseconds(500), totalTimeout: .seconds(1)
        ))
        let refresh = OAuthRefresh(refreshToken: "SECRET-RT", tokenEndpoint: endpoint, clientID: "app")
        #expect {
            try client.refreshAccessToken(refresh)
        } throws: { error in
            guard case .refused(let reason) = error as? OAuthRefreshError else { return false }
            return reason.hasPrefix("not sent") && !"\(error)".contains("SECRET-RT")
        }
    }
}
