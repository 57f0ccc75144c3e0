@testable import EWS
import Testing

/// Which `WWW-Authenticate` answers let a password or token follow (RFC 9110: a list of
/// challenges, each a case-insensitive scheme and its parameters).
struct ChallengeTests {
    @Test(arguments: [
        ("Basic realm=\"sim\", Bearer", "Basic", true),
        ("Basic realm=\"sim\", Bearer", "Bearer", true),
        ("bearer error=\"invalid_token\"", "Bearer", true),
        ("BASIC realm=\"x\"", "Basic", true),
        ("Negotiate", "Basic", false),
        ("NTLM, Negotiate", "Bearer", false),
        ("", "Basic", false),
        ("Basicish realm=\"x\"", "Basic", false),
    ])
    func aChallengeNamesItsScheme(header: String, scheme: String, offered: Bool) {
        #expect(EWSClient.challenges(header, for: scheme) == offered)
    }

    @Test func noHeaderIsNoChallenge() {
        #expect(!EWSClient.challenges(nil, for: "Basic"))
    }
}
