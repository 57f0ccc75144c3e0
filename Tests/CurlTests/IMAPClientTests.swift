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

    /// A hostile server that answers SETMETADATA with untagged `* SETMETADATA ...`
    /// lines (Tests/tools/imap_hostile.py): libcurl's default write callback would print
    /// them to standard output, the journal or, in CGI mode, the answer. Nothing
    /// reaches standard output; the lines are still read as replies.
    @Test func aServersUntaggedLinesNeverReachStandardOutput() throws {
        try withTemporaryDirectory { directory in
            let path = directory.path
            _ = try Shell.run("""
                openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \\
                  -addext subjectAltName=IP:127.0.0.1 -days 1 -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
                python3 "$2" "$1/cert.pem" "$1/key.pem" "$1/port" 20 > "$1/server.log" 2>&1 &
                echo $! > "$1/server.pid"
                """, [path, Self.hostileServer])
            defer { _ = try? Shell.run("kill \"$(cat \"$1/server.pid\")\" 2>/dev/null; true", [path]) }
            var port = ""
            for _ in 0..<100 where port.isEmpty {
                port = (try? String(contentsOfFile: path + "/port", encoding: .utf8)) ?? ""
                if port.isEmpty { Thread.sleep(forTimeInterval: 0.05) }
            }
            try #require(!port.isEmpty, "the hostile server did not start")
            let imap = try IMAPClient(configuration: IMAPServerConfiguration(url: "imaps://127.0.0.1:\(port)/", caBundlePath: path + "/cert.pem",
                                                                             totalTimeout: .seconds(10)))
            let (replies, printed) = try Self.standardOutput {
                try imap.run("SETMETADATA \"\" (\(Self.key) \"x\")", replyName: "SETMETADATA", login: "a@example.org", password: "pass")
            }
            #expect(replies.count == 20 && replies.first == "STDOUT-MARKER-0", "\(replies.prefix(2))")
            #expect(!printed.contains("STDOUT-MARKER"), "\(printed.prefix(200))")
        }
    }

    static let hostileServer = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../tools/imap_hostile.py").standardizedFileURL.path

    /// What `body` wrote to standard output (fd 1, libc's buffer flushed), given back to
    /// it afterwards so that nothing another test printed meanwhile is lost.
    static func standardOutput<T>(_ body: () throws -> T) throws -> (T, String) {
        let capture = FileManager.default.temporaryDirectory.appendingPathComponent("ens-stdout-\(UUID().uuidString)").path
        fflush(nil)
        let saved = dup(1), file = open(capture, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        try #require(saved >= 0 && file >= 0)
        dup2(file, 1)
        let result = Result { try body() }
        fflush(nil)
        dup2(saved, 1)
        close(saved)
        close(file)
        let printed = (try? String(contentsOfFile: capture, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: capture)
        if !printed.isEmpty { FileHandle.standardOutput.write(Data(printed.utf8)) }
        return (try result.get(), printed)
    }
}
