@testable import Codecs
import ENSTestSupport
import Testing

/// Header decoding, checked against Python's email package (an implementation
/// independent of ours) and against what Dovecot's push plugin was seen sending.
@Suite struct MIMEHeaderTests {
    /// The raw headers Dovecot sends (docs/dovecot.md, research notes), and others a
    /// mailer writes.
    static let samples = [
        "=?UTF-8?Q?J=C3=BCrgen_M=C3=BCller?= <juergen@example.net>",
        "=?UTF-8?B?R3LDvMOfZSBhdXMgS8O2bG4g4oCUIHRlc3Qg8J+Tpw==?=",
        "=?ISO-8859-1?Q?Andr=E9?= Pirard <PIRARD@vm1.ulg.ac.be>",
        "=?iso-8859-1?q?this=20is=20some=20text?=",
        "=?UTF-8?B?w6k=?= =?UTF-8?B?w6k=?=",
        "a =?UTF-8?Q?b?= c",
        "=?UTF-8?Q?a?=   =?ISO-8859-1?Q?=E9?=",
        "=?windows-1252?Q?=80_and_=93quotes=94?=",
        "=?ISO-8859-15?Q?=A4uro?=",
        "=?UTF-8?B?8J+T?= =?UTF-8?B?pw==?=",
        "plain ASCII subject",
    ]

    @Test func decodingAgreesWithPythonsEmailPackage() throws {
        for sample in Self.samples {
            let python = try Shell.python("""
                import sys
                from email.header import decode_header, make_header
                sys.stdout.write(str(make_header(decode_header(sys.argv[1]))))
                """, [sample])
            #expect(MIMEHeader.decode(sample) == python, "\(sample)")
        }
    }

    /// RFC 2231's language after the charset (Python's email package does not take it).
    @Test func aLanguageAfterTheCharsetIsIgnored() {
        #expect(MIMEHeader.decode("=?utf-8*en?Q?with_language?=") == "with language")
    }

    @Test func foldedLinesAreJoined() {
        // As Dovecot sends a folded Subject (the JSON's "\n\t").
        #expect(MIMEHeader.decode("folded line one\n\tline two") == "folded line one line two")
        #expect(MIMEHeader.decode("=?UTF-8?Q?one?=\r\n =?UTF-8?Q?_two?=") == "one two")
        // A line break that does not fold, and other controls, are spaces.
        #expect(MIMEHeader.decode("a\nb\u{7}c\u{202E}d") == "a b c d")
    }

    @Test func whatCannotBeDecodedStaysReadable() {
        // An unknown charset, a bad encoding letter, broken Q: the word stays as written.
        #expect(MIMEHeader.decode("=?KOI8-R?Q?x?= y") == "=?KOI8-R?Q?x?= y")
        #expect(MIMEHeader.decode("=?UTF-8?X?abc?=") == "=?UTF-8?X?abc?=")
        #expect(MIMEHeader.decode("=?UTF-8?Q?=ZZ?=") == "=?UTF-8?Q?=ZZ?=")
        #expect(MIMEHeader.decode("=?UTF-8?Q?unterminated") == "=?UTF-8?Q?unterminated")
        // Bytes that are not UTF-8 become U+FFFD; Dovecot does the same with raw 8-bit.
        #expect(MIMEHeader.decode("=?UTF-8?B?/w==?=") == "\u{FFFD}")
        #expect(MIMEHeader.decode("=?US-ASCII?Q?=E9?=") == "\u{FFFD}")
    }

    @Test func theResultIsBoundedWhateverTheInput() {
        // Dovecot truncates nothing: a 110 KB Subject arrives whole.
        let huge = String(repeating: "=?UTF-8?B?8J+Tpw==?= ", count: 10_000)
        let decoded = MIMEHeader.decode(huge, limit: 256)
        #expect(decoded.utf8.count <= 256 && decoded.hasSuffix("…") && decoded.hasPrefix("📧📧"))
        #expect(MIMEHeader.decode(String(repeating: "x", count: 200_000), limit: 100).utf8.count <= 100)
        // Cut at a character, never inside one.
        #expect(MIMEHeader.decode("ééééé", limit: 8) == "éé…")
    }
}
