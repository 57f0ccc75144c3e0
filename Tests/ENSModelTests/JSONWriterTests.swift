import ENSTestSupport
import Foundation
import Testing
@testable import ENSModel

@Suite struct JSONWriterTests {
    @Test func escapesWhatJSONRequires() {
        var bytes: [UInt8] = []
        JSONObjectWriter.appendString("a\"b\\c\nd\re\tf\u{1}g\u{1F}é", to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #""a\"b\\c\nd\re\tf\u0001g\u001fé""#)
    }

    /// Foundation's JSONSerialization reads back every string the writer wrote.
    @Test func foundationReadsBackWhatWasWritten() throws {
        var generator = SeededGenerator(seed: 0x15AA)
        let alphabet = Array("ab \"\\/\u{0}\u{1}\u{8}\t\n\r\u{1F}\u{7F}Ü日\u{1F600}".unicodeScalars)
        for _ in 0..<1_000 {
            let text = generator.text(from: alphabet, maximumLength: 40)
            var writer = JSONObjectWriter()
            writer.add("k", text)
            writer.add(text, 7)  // the alphabet has no "k", so the keys differ
            let object = try JSONSerialization.jsonObject(with: Data(writer.finished())) as? [String: Any]
            #expect(object?["k"] as? String == text, "\(Array(text.utf8))")
            #expect(object?[text] as? Int == 7, "\(Array(text.utf8))")
        }
    }
}
