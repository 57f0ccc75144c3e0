import ENSHTTP
import ENSTestSupport
import Codecs
import OpenSSL
import Testing
@testable import ENSResponder
@testable import MailBackends

@Suite struct IdentityTests {
    /// Hex SHA-256 of `text` by the openssl CLI.
    static func opensslSHA256(_ text: String) throws -> String {
        try Shell.run("printf '%s' \"$1\" | openssl dgst -sha256 -binary | od -An -v -tx1 | tr -d ' \\n'", [text])
    }

    private func userID(_ values: [String: String], emailRequired: Bool = false) throws(APIError) -> String {
        try Identity.userID(Parameters(values), emailRequired: emailRequired)
    }

    private func refusal(_ values: [String: String], emailRequired: Bool = false,
                         sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        do {
            let id = try userID(values, emailRequired: emailRequired)
            Issue.record("expected a refusal, got \(id)", sourceLocation: sourceLocation)
            return nil
        } catch {
            #expect(error.response.status == 400, sourceLocation: sourceLocation)
            return error.reason
        }
    }

    @Test func derivedFromTheLowercasedEmail() throws {
        // The lowercase forms are written out here, so the CLI hashes an independent spelling.
        for (email, lowercase) in [
            ("ann@example.com", "ann@example.com"),
            ("Ann.Lee@Example.COM", "ann.lee@example.com"),
            ("ZOË@ÉCOLE.FR", "zoë@école.fr"),
            ("ÄÖÜ+tag@Example.org", "äöü+tag@example.org"),
        ] {
            let expected = try Self.opensslSHA256(lowercase)
            #expect(expected.utf8.count == 64)
            #expect(try userID(["email": email]) == expected, "\(email)")
        }
    }

    @Test func matchingUserIDAndEmailAreAccepted() throws {
        let expected = try Self.opensslSHA256("ann@example.com")
        #expect(try userID(["email": "Ann@Example.com", "userid": expected]) == expected)
        #expect(try userID(["email": "ann@example.com", "userid": expected.uppercased()]) == expected)
    }

    @Test func userIDAloneIsLowercased() throws {
        let id = Hex.encode(Digest.sha256("someone@example.com"))
        #expect(try userID(["userid": id]) == id)
        #expect(try userID(["userid": id.uppercased()]) == id)
        let mixed = String(id.enumerated().map { $0.offset % 2 == 0 ? Character($0.element.uppercased()) : $0.element })
        #expect(try userID(["userid": mixed]) == id)
    }

    @Test func mismatchIsRefused() {
        let other = Hex.encode(Digest.sha256("bob@example.com"))
        #expect(refusal(["email": "ann@example.com", "userid": other]) == "Parameters 'userid' and 'email' do not match.")
        // Not lowercased before hashing would give a different id: the email is lowercased, not the hash input as given.
        let unlowered = Hex.encode(Digest.sha256("Ann@Example.com"))
        #expect(refusal(["email": "Ann@Example.com", "userid": unlowered]) != nil)
    }

    @Test(arguments: [
        String(repeating: "a", count: 63), String(repeating: "a", count: 65), String(repeating: "a", count: 128),
        String(repeating: "g", count: 64), String(repeating: "0", count: 63) + "x", String(repeating: "0", count: 62) + "é",
        " " + String(repeating: "0", count: 63), String(repeating: "0", count: 63) + "\n", "0x" + String(repeating: "0", count: 62),
        "abc",
    ])
    func badUserIDIsRefused(text: String) {
        #expect(refusal(["userid": text]) == "Parameter 'userid' must be 64 hexadecimal characters.")
        // Also when an email is present: shape is checked before the comparison.
        #expect(refusal(["userid": text, "email": "ann@example.com"]) != nil)
    }

    @Test func missingIdentityIsRefused() {
        #expect(refusal([:]) == "Missing parameter 'userid'.")
        #expect(refusal(["email": "", "userid": ""]) == "Missing parameter 'userid'.")
        #expect(refusal(["other": "x"]) == "Missing parameter 'userid'.")
    }

    @Test func emptyValuesCountAsAbsent() throws {
        let id = Hex.encode(Digest.sha256("ann@example.com"))
        #expect(try userID(["email": "ann@example.com", "userid": ""]) == id)
        #expect(try userID(["email": "", "userid": id]) == id)
    }

    @Test func emailRequired() throws {
        let id = Hex.encode(Digest.sha256("ann@example.com"))
        #expect(refusal(["userid": id], emailRequired: true) == "Missing parameter 'email'.")
        #expect(refusal(["email": "", "userid": id], emailRequired: true) == "Missing parameter 'email'.")
        #expect(try userID(["email": "ANN@example.com"], emailRequired: true) == id)
        #expect(try userID(["email": "ann@example.com", "userid": id], emailRequired: true) == id)
    }

    @Test func refusalsDoNotEchoTheEmail() {
        let reason = refusal(["email": "secret.person@example.com", "userid": String(repeating: "0", count: 64)])
        #expect(reason?.contains("secret.person") == false)
    }

    /// `email` becomes Autodiscover's input and the X-AnchorMailbox header: anything
    /// that is not an address, header injection above all, is refused up front.
    @Test(arguments: [
        "no-at-sign", "two@@example.com", "a@b@example.com", "@example.com", "user@", "user@localhost",
        "user@example..com", "user@-example.com", "user@example.com.", ".user@example.com",
        "us er@example.com", "user@exa mple.com", "user\r\nX-Evil: 1@example.com", "user@example.com\r\nX-Evil: 1",
        "user\u{0}@example.com", "user@example.com\n", "<user@example.com>", "user@[127.0.0.1]",
        String(repeating: "a", count: 65) + "@example.com", "a@" + String(repeating: "b", count: 64) + ".com",
    ])
    func refusesWhatIsNotAnAddress(email: String) {
        #expect(refusal(["email": email]) == "Parameter 'email' must be an email address.")
    }

    @Test func acceptsOrdinaryAndInternationalAddresses() throws {
        for email in ["ann@example.com", "first.last+tag@mail.example.co.uk", "o'brien@example.ie", "zoë@école.fr", "x@xn--cole-9oa.fr"] {
            #expect(try userID(["email": email]).utf8.count == 64, "\(email)")
        }
    }
}
