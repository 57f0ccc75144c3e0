import ENSTestSupport
import Foundation
import Testing
@testable import ENSModel

@Suite struct UTF8TextTests {
    /// Foundation's decoder, an independent one, agrees on which bytes are UTF-8.
    @Test func agreesWithFoundationOnValidity() {
        var generator = SeededGenerator(seed: 0x0F8)
        // Bytes around UTF-8's edges: ASCII, continuation bytes, lead bytes, surrogates' and overlongs' leads.
        let alphabet: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0xA0, 0x9F]
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...6, using: &generator)).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] }
            let foundation = String(data: Data(bytes), encoding: .utf8)
            #expect(String.validatedUTF8(bytes) == foundation, "\(bytes)")
            #expect(String.validatedUTF8(([0x20] + bytes + [0x20])[1...].dropLast()) == foundation, "\(bytes) as a slice")
        }
        #expect(String.validatedUTF8(Array("héllo 日本 \u{1F600}".utf8)) == "héllo 日本 \u{1F600}")
    }
}
