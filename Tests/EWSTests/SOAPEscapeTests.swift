import ENSTestSupport
import Testing
import XML
@testable import EWS

@Suite struct SOAPEscapeTests {
    @Test func valuesWithoutMarkupComeBackAsTheyAre() {
        for text in ["", "AAMkADk0ZjU=", "Übersicht – 日本語", "tab\there\nand\r\nlines"] {
            #expect(SOAP.escape(text) == text)
        }
    }

    @Test func escapesMarkupAndDropsWhatXMLCannotCarry() {
        #expect(SOAP.escape(#"a&b<c>d"e'f"#) == "a&amp;b&lt;c&gt;d&quot;e&apos;f")
        #expect(SOAP.escape("x\u{0}y\u{1F}z\u{7F}") == "xyz\u{7F}")
        #expect(SOAP.escape("é&é") == "é&amp;é")
    }

    /// libxml2 reads back, in element content and in an attribute, what `escape` wrote:
    /// the text itself, less the control characters XML 1.0 cannot carry.
    @Test func libxml2ReadsBackWhatWasEscaped() throws {
        var generator = SeededGenerator(seed: 0x50A9)
        let alphabet = Array("ab &<>\"'\u{1}\u{8}\t\nÜ日\u{1F600}]]>".unicodeScalars)
        for _ in 0..<500 {
            let text = generator.text(from: alphabet, maximumLength: 40)
            let escaped = SOAP.escape(text)
            let document = try XMLTree.parse(Array("<a v=\"\(escaped)\">\(escaped)</a>".utf8))
            let expected = String(String.UnicodeScalarView(text.unicodeScalars.filter {
                $0.value >= 0x20 || $0 == "\t" || $0 == "\n" || $0 == "\r"
            }))
            // XML normalises line ends to \n in content, and every white-space
            // character in an attribute value to a space.
            let content = expected.replacingCRLF()
            #expect(document.text == content, "\(Array(text.utf8))")
            #expect(document.attributes["v"] == String(content.map { $0 == "\n" || $0 == "\t" ? " " : $0 }), "\(Array(text.utf8))")
        }
    }
}

private extension String {
    func replacingCRLF() -> String {
        var out = ""
        var previousCR = false
        for scalar in unicodeScalars {
            if scalar == "\r" { out.append("\n"); previousCR = true; continue }
            if scalar == "\n" && previousCR { previousCR = false; continue }
            previousCR = false
            out.unicodeScalars.append(scalar)
        }
        return out
    }
}
