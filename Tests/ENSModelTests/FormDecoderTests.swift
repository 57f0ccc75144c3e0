import ENSTestSupport
import Testing
@testable import ENSModel

@Suite struct FormDecoderTests {
    private func decode(_ text: String) throws(FormDecoder.Failure) -> [String: String] {
        try FormDecoder.decode(Array(text.utf8))
    }

    private func refuses(_ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let result = try FormDecoder.decode(bytes)
            Issue.record("expected a refusal, got \(result)", sourceLocation: sourceLocation)
        } catch {
            #expect(!error.problem.isEmpty, sourceLocation: sourceLocation)
        }
    }

    private func refuses(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        refuses(Array(text.utf8), sourceLocation: sourceLocation)
    }

    @Test func simplePairs() throws {
        #expect(try decode("a=1&b=two&c=") == ["a": "1", "b": "two", "c": ""])
        #expect(try decode("email=ann%40example.com&userid=ABC") == ["email": "ann@example.com", "userid": "ABC"])
    }

    @Test func emptyBody() throws {
        #expect(try FormDecoder.decode([]) == [:])
    }

    @Test func plusIsASpace() throws {
        #expect(try decode("q=a+b++c+") == ["q": "a b  c "])
        #expect(try decode("first+name=Ann+Lee") == ["first name": "Ann Lee"])
        #expect(try decode("p=%2B") == ["p": "+"], "an escaped plus stays a plus")
        #expect(try decode("p=%2b%20+") == ["p": "+  "])
    }

    @Test func percentEscapes() throws {
        #expect(try decode("a=%41%42%43") == ["a": "ABC"])
        #expect(try decode("a=%c3%a9%C3%A9") == ["a": "éé"], "hex digits of either case")
        #expect(try decode("a=%F0%9F%98%80") == ["a": "😀"])
        #expect(try decode("a=%26%3D%25") == ["a": "&=%"], "escaped separators are data")
        #expect(try decode("k%3Dx=v%26w") == ["k=x": "v&w"])
        #expect(try decode("a=%0A%0D%09") == ["a": "\n\r\t"])
        #expect(try decode("a=100%25") == ["a": "100%"])
    }

    @Test func rawUTF8IsKept() throws {
        #expect(try decode("name=Zoë&city=Kraków") == ["name": "Zoë", "city": "Kraków"])
    }

    @Test func valueMayContainEquals() throws {
        #expect(try decode("a=b=c") == ["a": "b=c"])
        #expect(try decode("a==") == ["a": "="])
        #expect(try decode("sig=YWJj==") == ["sig": "YWJj=="], "base64 padding survives")
    }

    @Test func nameWithoutValue() throws {
        #expect(try decode("flag") == ["flag": ""])
        #expect(try decode("flag&x=1") == ["flag": "", "x": "1"])
    }

    @Test func emptyPairsAreSkipped() throws {
        #expect(try decode("&") == [:])
        #expect(try decode("&&&") == [:])
        #expect(try decode("&a=1&&b=2&") == ["a": "1", "b": "2"])
    }

    @Test(arguments: ["=", "=1", "a=1&=2", "&=&", "=x=y"])
    func emptyNameIsRefused(text: String) {
        refuses(text)
    }

    @Test(arguments: [
        "a=%", "a=%4", "a=%zz", "a=%4g", "a=%g4", "a=% 4", "a=%%41",             // at the end of the body
        "a=%&b=1", "a=%4&b=1", "a=%zz&b=1", "a=x%y&b=1", "a=%-1&b=1",             // in the middle
        "%=1", "%4=1", "%zz=1", "a%=1", "b=1&%41%4=2",                            // in a name
        "a=%u0041", "a=%+41", "a=%\u{e9}9",
    ])
    func malformedEscapesAreRefused(text: String) {
        refuses(text)
    }

    @Test func escapeAtTheVeryEndIsComplete() throws {
        // Exactly three bytes left: a complete escape, not an overrun.
        #expect(try decode("a=%41") == ["a": "A"])
        #expect(try decode("%41") == ["A": ""])
        #expect(try decode("%41=%42") == ["A": "B"])
    }

    @Test func nulIsRefused() {
        refuses("a=%00")
        refuses("a=x%00y")
        refuses("%00=1")
        refuses("a%00b=1")
        refuses(Array("a=x".utf8) + [0x00] + Array("y".utf8))
        refuses([0x00] + Array("=1".utf8))
    }

    @Test(arguments: ["a=%FF", "a=%C3", "a=%C3%28", "a=%C0%80", "a=%ED%A0%80", "a=%F4%90%80%80", "a=%80", "%FF=1", "a=%E2%82"])
    func invalidUTF8IsRefused(text: String) {
        refuses(text)
    }

    @Test func rawInvalidUTF8IsRefused() {
        refuses(Array("a=".utf8) + [0xFF])
        refuses(Array("a=".utf8) + [0xC3] + Array("&b=1".utf8))
        refuses([0xFE] + Array("=1".utf8))
    }

    @Test func otherControlCharactersPassThrough() throws {
        // Only NUL is singled out; other control characters are the endpoint's business.
        #expect(try decode("a=%01%1F%7F") == ["a": "\u{01}\u{1F}\u{7F}"])
    }

    @Test(arguments: ["a=1&a=2", "a=1&a=1", "a&a", "a=&a=", "a=1&b=2&a=3", "a=1&%61=2", "a+b=1&a%20b=2", "%C3%A9=1&\u{e9}=2"])
    func repeatedNamesAreRefused(text: String) {
        refuses(text)
    }

    @Test func repeatedNameErrorNamesTheFieldButNotTheValue() {
        do {
            _ = try decode("token=secret-one&token=secret-two")
            Issue.record("expected a refusal")
        } catch {
            #expect(error.description.contains("token"))
            #expect(!error.description.contains("secret"))
        }
    }

    @Test func namesAreCaseSensitive() throws {
        #expect(try decode("a=1&A=2") == ["a": "1", "A": "2"])
    }

    @Test func randomBytesNeverTrap() {
        var generator = SeededGenerator(seed: 0xF0F0)
        let alphabet = Array("ab=&%+0123456789AaFfGz".utf8) + [0x00, 0x80, 0xC3, 0xFF]
        for _ in 0..<5000 {
            let length = Int.random(in: 0...24, using: &generator)
            _ = try? FormDecoder.decode((0..<length).map { _ in alphabet.randomElement(using: &generator)! })
        }
    }

    @Test func percentDecodeOnASliceUsesItsOwnIndices() throws {
        // Slices keep the indices of their base array; decoding must respect them.
        let base = Array("xx%41%42yy".utf8)
        #expect(try FormDecoder.percentDecode(base[2..<8]) == Array("AB".utf8))
        #expect(throws: FormDecoder.Failure.self) { try FormDecoder.percentDecode(base[2..<7]) }
    }
}
