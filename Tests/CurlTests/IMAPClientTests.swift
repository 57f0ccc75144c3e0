@testable import Curl
import ENSTestSupport
import Foundation
import Testing

/// The IMAP client against a real Dovecot (scripts/dovecot.sh): the login that proves a
/// password, and METADATA, the opt-in Dovecot's push plugin reads.
@Suite(.serialized) struct IMAPClientTests {
    static let key = "/private/vendor/vendor.ens/push-token"

    func client(_ dovecot: DovecotInstance, url: String? = nil, caBundlePath: String? = nil) throws -> IMAPClient {
        try IMAPClient(configuration: IMAPServerConfiguration(url: url ?? dovecot.imapsURL, caBundlePath: caBundlePath ?? dovecot.certificatePath,
                                                              totalTimeout: .seconds(10)))
    }

    @Test func aGoodPasswordWritesAndReadsMetadataOnOneConnection() throws {
        let dovecot = try DovecotInstance()
        defer { dovecot.stop() }
        try dovecot.addUser("alice@example.org", password: "alice-pass")
        let imap = try client(dovecot)
        let set = try imap.run("SETMETADATA \"\" (\(Self.key) \"ens1.q3J9xZ0a-_\")", login: "alice@example.org", password: "alice-pass")
        #expect(set.isEmpty)
        let read = try imap.run("GETMETADATA \"\" \(Self.key)", replyName: "METADATA", login: "alice@example.org", password: "alice-pass")
        // Dovecot sends the value as a literal ({15} and the bytes), spliced in.
        #expect(read == ["\"\" (\(Self.key) ens1.q3J9xZ0a-_)"], "\(read)")
        // Dovecot's own tool reads what the client wrote.
        #expect(try dovecot.metadata(Self.key, of: "alice@example.org") == "ens1.q3J9xZ0a-_")
        // NIL removes it (the opt-out).
        _ = try imap.run("SETMETADATA \"\" (\(Self.key) NIL)", login: "alice@example.org", password: "alice-pass")
        #expect(try dovecot.metadata(Self.key, of: "alice@example.org") == "")
        // One login for the three commands: the connection was reused.
        let log = try Shell.run("cat \"$1/dovecot.log\"", [dovecot.directory.path])
        #expect(log.components(separatedBy: "Login: user=<alice@example.org>").count - 1 == 1, "\(log)")
    }

    @Test func aWrongPasswordIsLoginDenied() throws {
        let dovecot = try DovecotInstance()
        defer { dovecot.stop() }
        try dovecot.addUser("alice@example.org", password: "alice-pass")
        let imap = try client(dovecot)
        do {
            _ = try imap.run("NOOP", login: "alice@example.org", password: "guess")
            Issue.record("a wrong password logged in")
        } catch {
            #expect(error.kind == .loginDenied, "\(error)")
            #expect(!error.description.contains("guess"))
        }
        // The right password afterwards works on a fresh connection.
        #expect(throws: Never.self) { try imap.run("NOOP", login: "alice@example.org", password: "alice-pass") }
    }

    @Test func aRefusedCommandIsCommandRefused() throws {
        let dovecot = try DovecotInstance()
        defer { dovecot.stop() }
        try dovecot.addUser("alice@example.org", password: "alice-pass")
        let imap = try client(dovecot)
        do {
            _ = try imap.run("SETMETADATA \"\" (/nowhere \"x\")", login: "alice@example.org", password: "alice-pass")
            Issue.record("Dovecot took a metadata name outside /private and /shared")
        } catch {
            #expect(error.kind == .commandRefused, "\(error)")
        }
    }

    @Test func anUntrustedCertificateIsATLSFailure() throws {
        let dovecot = try DovecotInstance()
        defer { dovecot.stop() }
        try dovecot.addUser("alice@example.org", password: "alice-pass")
        // The system store does not know the instance's self-signed certificate.
        let imap = try IMAPClient(configuration: IMAPServerConfiguration(url: dovecot.imapsURL, totalTimeout: .seconds(10)))
        #expect { try imap.run("NOOP", login: "alice@example.org", password: "alice-pass") } throws: { ($0 as? CurlError)?.kind == .tlsFailure }
        // Nor does a login happen: the log shows no authentication attempt.
        let log = try Shell.run("cat \"$1/dovecot.log\"", [dovecot.directory.path])
        #expect(!log.contains("user=<alice@example.org>"), "\(log)")
    }

    @Test func starttlsIsRequiredOnPlainIMAP() throws {
        let dovecot = try DovecotInstance()
        defer { dovecot.stop() }
        try dovecot.addUser("alice@example.org", password: "alice-pass")
        let imap = try client(dovecot, url: "imap://127.0.0.1:\(dovecot.port + 1)/")
        #expect(try imap.run("NOOP", replyName: "CAPABILITY", login: "alice@example.org",
                             password: "alice-pass").contains { $0.contains("METADATA") })
        let log = try Shell.run("cat \"$1/dovecot.log\"", [dovecot.directory.path])
        #expect(log.contains("method=PLAIN") && log.contains(", TLS"), "\(log)")
    }

    @Test func commandsThatLibcurlWouldRewriteAreRefusedBeforeConnecting() throws {
        for command in ["SETMETADATA \"\" (/private/x \"a%41\")", "NOOP\r\nLOGOUT", "", String(repeating: "A", count: 1001)] {
            #expect(!IMAPClient.isSendable(command))
        }
        let imap = try IMAPClient(configuration: IMAPServerConfiguration(url: "imaps://127.0.0.1:1/"))
        #expect { try imap.run("NOOP%0A", login: "a", password: "b") } throws: { ($0 as? CurlError)?.kind == .invalidRequest }
        #expect { try imap.run("NOOP", login: "a\nb", password: "b") } throws: { ($0 as? CurlError)?.kind == .invalidRequest }
    }

    /// Literals (`{N}` then N bytes) are spliced into their line; tagged and
    /// continuation lines are not untagged replies.
    @Test func repliesSpliceLiteralsAndKeepOnlyUntaggedLines() {
        let bytes = Array("* CAPABILITY IMAP4rev1 METADATA\r\n* METADATA \"\" (/private/x {12}\r\nline1\r\nline2)\r\nA003 OK done\r\n+ go\r\n".utf8)
        #expect(IMAPReplies.lines(bytes) == ["* CAPABILITY IMAP4rev1 METADATA",
                                             "* METADATA \"\" (/private/x line1\r\nline2)", "A003 OK done", "+ go"])
        let replies = IMAPReplies(limit: 1000)
        bytes.withUnsafeBytes { replies.append($0) }
        #expect(replies.untagged(named: "METADATA") == ["\"\" (/private/x line1\r\nline2)"])
        #expect(replies.untagged(named: "OK").isEmpty)
        // A literal longer than what arrived is not spliced; the limit cuts what is kept.
        #expect(IMAPReplies.lines(Array("* METADATA \"\" (/x {99}\r\nab)\r\n".utf8)) == ["* METADATA \"\" (/x {99}", "ab)"])
        let cut = IMAPReplies(limit: 40)
        bytes.withUnsafeBytes { cut.append($0) }
        #expect(cut.untagged(named: "CAPABILITY") == ["IMAP4rev1 METADATA"] && cut.untagged(named: "METADATA").isEmpty)
    }
}
