import ENSTestSupport
@testable import MailBackends
import Testing

/// What a Dovecot server's push says, as the hook reads it: the ox driver's body as it
/// was seen on the wire (docs/dovecot.md), the Lua script's, and what is refused.
@Suite struct DovecotEventTests {
    /// One ox PUT, as observed from Dovecot 2.3.19 (research notes, section 1).
    static let ox = #"""
        {"user":"d1.token","event":"messageNew","folder":"INBOX","imap-uidvalidity":1795932928,"imap-uid":3,\#
        "from":"=?UTF-8?Q?J=C3=BCrgen_M=C3=BCller?= <juergen@example.net>","subject":"=?UTF-8?B?R3LDvMOfZSBhdXMgS8O2bG4g4oCUIHRlc3Qg8J+Tpw==?=",\#
        "snippet":"Hallo Alice, this is the first line","unseen":3}
        """#

    @Test func theOxDriversPushReads() throws {
        let event = try DovecotEvent(body: Array(Self.ox.utf8))
        #expect(event.token == "d1.token" && event.isNewMailInInbox && event.uidValidity == 1_795_932_928 && event.uid == 3)
        #expect(event.senderName == "Jürgen Müller" && event.subject == "Grüße aus Köln — test 📧" && event.unseen == 3)
        #expect(event.userName == nil && event.itemID == "1795932928.3")
    }

    @Test func senderNamesAsANotificationShowsThem() {
        #expect(DovecotEvent.senderName(from: #""Quote, Person" <q@example.net>"#) == "Quote, Person")
        #expect(DovecotEvent.senderName(from: "<only@example.net>") == "only@example.net")
        #expect(DovecotEvent.senderName(from: "bare@example.net") == "bare@example.net")
        #expect(DovecotEvent.senderName(from: #""Back\"slash" <b@example.net>"#) == #"Back"slash"#)
        #expect(DovecotEvent.senderName(from: "") == "")
    }

    @Test func otherEventsAndFoldersAreNotNewMail() throws {
        for body in [#"{"user":"t","event":"FlagsSet","folder":"INBOX","imap-uidvalidity":1,"imap-uid":1}"#,
                     #"{"user":"t","event":"messageNew","folder":"Junk","imap-uidvalidity":1,"imap-uid":1}"#] {
            #expect(try !DovecotEvent(body: Array(body.utf8)).isNewMailInInbox)
        }
        // The documentation's spelling counts too.
        #expect(try DovecotEvent(body: Array(#"{"user":"t","event":"MessageNew","folder":"INBOX","imap-uidvalidity":1,"imap-uid":1}"#.utf8))
                    .isNewMailInInbox)
    }

    @Test func whatIsNoPushIsRefusedWithItsReason() {
        let cases: [(String, String)] = [
            ("{not json", "not JSON"), ("[1]", "not a JSON object"),
            (#"{"event":"messageNew","imap-uidvalidity":1,"imap-uid":1}"#, "user"),
            (#"{"user":"t","imap-uidvalidity":1,"imap-uid":1}"#, "event is missing"),
            (#"{"user":"t","event":"messageNew","imap-uid":1}"#, "imap-uidvalidity"),
            (#"{"user":"t","event":"messageNew","imap-uidvalidity":-1,"imap-uid":1}"#, "32-bit"),
            (#"{"user":"t","event":"messageNew","imap-uidvalidity":4294967296,"imap-uid":1}"#, "32-bit"),
            (#"{"user":1,"event":"messageNew","imap-uidvalidity":1,"imap-uid":1}"#, "user is not a string"),
            (#"{"user":"t","event":"messageNew","imap-uidvalidity":1,"imap-uid":1,"subject":{}}"#, "subject is not a string"),
        ]
        for (body, reason) in cases {
            #expect { try DovecotEvent(body: Array(body.utf8)) } throws: { "\($0)".contains(reason) }
        }
    }

    @Test func hookCredentialsAreReadStrictly() {
        #expect(DovecotHook.basicCredentials("Basic aG9zdGluZzE6c2VjcmV0") ?? ("", "") == ("hosting1", "secret"))
        #expect(DovecotHook.basicCredentials("basic aG9zdGluZzE6c2VjcmV0")?.name == "hosting1")
        // No header, another scheme, no colon, a name no server may have.
        for header in [nil, "Bearer x", "Basic aG9zdGluZzE=", "Basic SG9zdGluZzE6cw==", "Basic !!!"] {
            #expect(DovecotHook.basicCredentials(header) == nil, "\(header ?? "nil")")
        }
    }
}
