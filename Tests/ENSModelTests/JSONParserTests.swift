import ENSTestSupport
import Testing
@testable import ENSModel

@Suite struct JSONParserTests {
    private func parse(_ text: String, maximumDepth: Int = JSONParser.defaultMaximumDepth) throws(JSONParseError) -> JSONValue {
        try JSONParser.parse(Array(text.utf8), maximumDepth: maximumDepth)
    }

    private func refuses(_ bytes: [UInt8], maximumDepth: Int = JSONParser.defaultMaximumDepth,
                         sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let value = try JSONParser.parse(bytes, maximumDepth: maximumDepth)
            Issue.record("expected a refusal, got \(value) for \(bytes.prefix(80))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.offset >= 0 && error.offset <= bytes.count, "offset \(error.offset) outside the input", sourceLocation: sourceLocation)
            #expect(!error.problem.isEmpty, sourceLocation: sourceLocation)
        }
    }

    private func refuses(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        refuses(Array(text.utf8), sourceLocation: sourceLocation)
    }

    // MARK: Valid documents

    @Test func scalarsAtTopLevel() throws {
        #expect(try parse("true") == .bool(true))
        #expect(try parse("false") == .bool(false))
        #expect(try parse("null") == .null)
        #expect(try parse("\"text\"") == .string("text"))
        #expect(try parse("\"\"") == .string(""))
        #expect(try parse("0") == .number("0"))
        #expect(try parse(" \t\r\n 42 \n\t\r ") == .number("42"))
    }

    @Test func emptyContainers() throws {
        #expect(try parse("[]") == .array([]))
        #expect(try parse("{}") == .object([:]))
        #expect(try parse("[ \n ]") == .array([]))
        #expect(try parse("{ \t }") == .object([:]))
    }

    @Test func nestedDocument() throws {
        let text = """
        {"name": "Ann", "age": 37, "tags": ["a", "b"], "flags": {"on": true, "off": false, "none": null},
         "matrix": [[1, 2], [], [{"x": -0.5}]]}
        """
        let value = try parse(text)
        #expect(value == .object([
            "name": .string("Ann"),
            "age": .number("37"),
            "tags": .array([.string("a"), .string("b")]),
            "flags": .object(["on": .bool(true), "off": .bool(false), "none": .null]),
            "matrix": .array([.array([.number("1"), .number("2")]), .array([]), .array([.object(["x": .number("-0.5")])])]),
        ]))
        #expect(value["name"]?.stringValue == "Ann")
        #expect(value["age"]?.stringValue == nil)
        #expect(value["missing"] == nil)
        #expect(value["tags"]?["a"] == nil, "subscript on a non-object is nil")
    }

    @Test(arguments: [
        "0", "-0", "1", "-1", "10", "1234567890", "0.5", "-0.5", "3.14159", "1e5", "1E5", "1e+5", "1e-5", "1.5E-10",
        "-0.0e0", "123456789012345678901234567890", "0.000000000000000000000000000001", "9007199254740993",
        "1.7976931348623157e309",
    ])
    func numbersKeepTheirSourceText(text: String) throws {
        #expect(try parse(text) == .number(text))
        #expect(try parse("[\(text)]") == .array([.number(text)]))
        #expect(try parse("{\"n\":\(text)}")["n"] == .number(text))
    }

    @Test func numberLengthLimit() throws {
        let sixtyFour = String(repeating: "7", count: 64)
        #expect(try parse(sixtyFour) == .number(sixtyFour))
        refuses(String(repeating: "7", count: 65))
        refuses("-" + sixtyFour)
    }

    @Test(arguments: [
        "01", "00", "-01", "+1", ".5", "-", "-.5", "1.", "1.e5", "1e", "1e+", "1e-", "1E", "1ee5", "1e5.5", "0x10",
        "1_000", "NaN", "Infinity", "-Infinity", "1 2", "--1", "1.5.5", "[01]", "[1.]", "{\"a\":01}", "{\"a\":1e}",
    ])
    func badNumbersAreRefused(text: String) {
        refuses(text)
    }

    @Test func scalarTextOfEachKind() throws {
        #expect(JSONValue.string("a b").scalarText == "a b")
        #expect(JSONValue.number("-1.5e3").scalarText == "-1.5e3")
        #expect(JSONValue.bool(true).scalarText == "1")
        #expect(JSONValue.bool(false).scalarText == "0")
        #expect(JSONValue.null.scalarText == nil)
        #expect(JSONValue.array([]).scalarText == nil)
        #expect(JSONValue.object([:]).scalarText == nil)
    }

    // MARK: Strings and escapes

    @Test func simpleEscapes() throws {
        #expect(try parse(#""\" \\ \/ \b \f \n \r \t""#) == .string("\" \\ / \u{08} \u{0C} \n \r \t"))
    }

    @Test func unicodeEscapes() throws {
        #expect(try parse(#""\u0041\u00e9\u00E9\u20AC""#) == .string("Aéé€"))
        #expect(try parse(#""\u0000""#) == .string("\u{0}"))
        #expect(try parse(#""\u001f\u007F""#) == .string("\u{1F}\u{7F}"))
        #expect(try parse(#""\uFFFF""#) == .string("\u{FFFF}"))
    }

    @Test func surrogatePairs() throws {
        #expect(try parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try parse(#""\uD83D\uDE00""#) == .string("😀"))
        #expect(try parse(#""\uD800\uDC00""#) == .string("\u{10000}"))
        #expect(try parse(#""\uDBFF\uDFFF""#) == .string("\u{10FFFF}"))
        #expect(try parse(#""a\ud834\udd1eb""#) == .string("a𝄞b"))
    }

    @Test(arguments: [
        #""\ud83d""#,            // high surrogate at the end
        #""\ud83dx""#,           // high surrogate followed by text
        #""\ud83d\n""#,          // followed by another escape
        #""\ud83d\u0041""#,      // followed by a non-surrogate
        #""\ud83d\ud83d""#,      // followed by another high surrogate
        #""\ude00""#,            // low surrogate alone
        #""\ude00\ud83d""#,      // reversed pair
        #""\udfff""#,
    ])
    func loneSurrogatesAreRefused(text: String) {
        refuses(text)
    }

    @Test(arguments: [#""\u12""#, #""\u12G4""#, #""\u""#, #""\x41""#, #""\a""#, #""\U0041""#, #""\'""#, #""\ ""#, #""\"#])
    func badEscapesAreRefused(text: String) {
        refuses(text)
    }

    @Test func rawUnicodeIsKept() throws {
        #expect(try parse("\"héllo wörld € 😀 \u{7F}\"") == .string("héllo wörld € 😀 \u{7F}"))
        // An escape next to raw multibyte text.
        #expect(try parse("\"é\\u00e9é\"") == .string("ééé"))
    }

    @Test func controlCharactersInStringsAreRefused() {
        for byte in UInt8(0)..<0x20 {
            refuses([0x22, 0x61, byte, 0x62, 0x22])
            refuses(Array("{\"k\":\"".utf8) + [byte] + Array("\"}".utf8))
            refuses([0x22, byte, 0x22])
        }
        // As a member name too.
        refuses(Array("{\"a".utf8) + [0x0A] + Array("\":1}".utf8))
    }

    @Test(arguments: [
        [0xFF], [0xFE], [0x80], [0xBF],                // bytes that never appear in UTF-8
        [0xC3], [0xE2, 0x82], [0xF0, 0x9F, 0x98],      // truncated sequences
        [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x80, 0x80], [0xF0, 0x80, 0x80, 0x80],  // overlong
        [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF],        // UTF-8-encoded surrogates
        [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80],  // above U+10FFFF
        [0xC3, 0x28], [0xE2, 0x28, 0xA1],              // bad continuation
    ] as [[UInt8]])
    func invalidUTF8IsRefused(sequence: [UInt8]) {
        refuses([0x22] + sequence + [0x22])
        refuses([0x22, 0x61] + sequence + [0x62, 0x22])
        refuses(Array("{\"k\":\"".utf8) + sequence + Array("\"}".utf8))
        refuses(Array("{\"".utf8) + sequence + Array("\":1}".utf8))
        refuses(sequence)                        // outside a string
        refuses(Array("[1,".utf8) + sequence + Array("]".utf8))
    }

    @Test func rawBytesAroundEscapesMustStillBeUTF8() {
        // A lead byte followed by an escape, and an escape followed by a continuation byte.
        refuses([0x22, 0xC3] + Array("\\u00e9".utf8) + [0x22])
        refuses([0x22] + Array("\\u00e9".utf8) + [0xA9, 0x22])
    }

    // MARK: Structure

    @Test(arguments: [
        "", " ", "\n\t", "[", "]", "{", "}", "[1,]", "[,1]", "[1 2]", "[1,,2]", "{\"a\"}", "{\"a\":}", "{\"a\" 1}",
        "{\"a\":1,}", "{,\"a\":1}", "{a:1}", "{'a':1}", "{1:1}", "{\"a\":1 \"b\":2}", "['a']", "tru", "truee", "True",
        "nul", "NULL", "fals", "[true false]", "\"abc", "\"abc\\\"", "{\"a\":1]", "[1}", "//x\n1", "/*x*/1",
        "\u{FEFF}1", "\u{A0}1", "\u{0B}1", "\u{0C}1",
    ])
    func malformedDocumentsAreRefused(text: String) {
        refuses(text)
    }

    @Test(arguments: ["1 2", "{} {}", "[] x", "null null", "\"a\"\"b\"", "{}]", "[]]", "1,", "true\u{0}"])
    func trailingDataIsRefused(text: String) {
        refuses(text)
    }

    @Test func trailingWhitespaceIsAllowed() throws {
        #expect(try parse("{} \r\n\t") == .object([:]))
    }

    @Test func duplicateKeysAreRefused() {
        refuses(#"{"a":1,"a":2}"#)
        refuses(#"{"a":1,"b":2,"a":1}"#)
        refuses(#"{"a":{"x":1},"a":null}"#)
        refuses(#"{"outer":{"a":1,"a":2}}"#)
        refuses(#"[{"a":1,"a":1}]"#)
        // The same name spelled with an escape is still the same name.
        refuses(#"{"a":1,"\u0061":2}"#)
        refuses(#"{"é":1,"\u00e9":2}"#)
    }

    @Test func sameKeyInDifferentObjectsIsFine() throws {
        let value = try parse(#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#)
        #expect(value["a"]?["a"] == .number("1"))
    }

    @Test func nestingUpToTheLimitIsAccepted() throws {
        let depth = JSONParser.defaultMaximumDepth
        var expected = JSONValue.array([])
        for _ in 1..<depth { expected = .array([expected]) }
        #expect(try parse(String(repeating: "[", count: depth) + String(repeating: "]", count: depth)) == expected)
        let objects = String(repeating: "{\"k\":", count: depth - 1) + "{}" + String(repeating: "}", count: depth - 1)
        #expect(throws: Never.self) { try parse(objects) }
        // Scalars inside the deepest container do not count as a level.
        #expect(throws: Never.self) { try parse(String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)) }
    }

    @Test func nestingBeyondTheLimitIsRefused() {
        let depth = JSONParser.defaultMaximumDepth + 1
        refuses(String(repeating: "[", count: depth) + String(repeating: "]", count: depth))
        refuses(String(repeating: "{\"k\":", count: depth - 1) + "{}" + String(repeating: "}", count: depth - 1))
        refuses(String(repeating: "[{\"k\":", count: depth / 2 + 1) + "1" + String(repeating: "}]", count: depth / 2 + 1))
    }

    @Test func veryDeepNestingIsRefusedWithoutCrashing() {
        refuses(String(repeating: "[", count: 10_000))
        refuses(String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000))
        refuses(String(repeating: "{\"a\":", count: 10_000))
        refuses(String(repeating: "[{\"a\":", count: 10_000))
        refuses(Array(repeating: UInt8(ascii: "["), count: 1_000_000))
    }

    @Test func customDepthLimit() throws {
        #expect(try parse("[]", maximumDepth: 1) == .array([]))
        #expect(try parse("7", maximumDepth: 0) == .number("7"))
        refuses(Array("[[]]".utf8), maximumDepth: 1)
        refuses(Array("[]".utf8), maximumDepth: 0)
        refuses(Array("{}".utf8), maximumDepth: 0)
    }

    @Test func everyTruncationIsRefused() throws {
        // Ends with its closing brace, so every strict prefix is incomplete. It has raw
        // multibyte text (so prefixes cut inside UTF-8 sequences), every escape, a
        // surrogate pair (cut inside it), numbers of every shape and every literal.
        let document = #"{"s":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00 é😀","n":[0,-1,2.50,-3e+7,4E-2,5e6],"l":[true,false,null],"o":{"e":{},"a":[]}}"#
        let bytes = Array(document.utf8)
        #expect(throws: Never.self) { try JSONParser.parse(bytes) }
        for length in 0..<bytes.count {
            refuses(Array(bytes[0..<length]))
        }
        // Cutting from the front must not crash either (most of these are refusals).
        for start in 1..<bytes.count {
            _ = try? JSONParser.parse(Array(bytes[start...]))
        }
    }

    @Test func everySingleByteCorruptionIsHandled() {
        // Replacing any byte with any of a few troublemakers must throw or parse, never trap.
        let bytes = Array(#"{"a":[1,"x\u0041",true],"b":{"c":-2.5e3}}"#.utf8)
        for index in bytes.indices {
            for replacement: UInt8 in [0x00, 0x22, 0x5C, 0x5B, 0x7B, 0x5D, 0x7D, 0x2C, 0x3A, 0x2D, 0x65, 0x75, 0xFF, 0xC3] {
                var corrupted = bytes
                corrupted[index] = replacement
                _ = try? JSONParser.parse(corrupted)
            }
        }
    }

    @Test func errorDescriptionNeverContainsTheInput() {
        let secret = "hunter2-correct-horse"
        for text in ["{\"password\":\"\(secret)\"", "{\"password\":\"\(secret)\"} trailing",
                     "{\"\(secret)\":1,\"\(secret)\":2}", "[\"\(secret)\u{01}\"]"] {
            do {
                _ = try parse(text)
                Issue.record("expected a refusal")
            } catch {
                #expect(!error.description.contains(secret))
                #expect(!error.description.contains("hunter2"))
                #expect(error.description.hasPrefix("invalid JSON at byte \(error.offset): "))
            }
        }
    }

    @Test func errorOffsetPointsAtTheProblem() {
        #expect(throws: JSONParseError(offset: 3, problem: "unexpected data after the value")) { try parse("{} x") }
        #expect(throws: JSONParseError(offset: 0, problem: "unexpected end of input")) { try parse("") }
    }

    @Test func randomDocumentsNeverTrap() {
        // Random byte soup drawn from JSON's own alphabet: parse or refuse, nothing else.
        var generator = SeededGenerator(seed: 0x4A53_4F4E)
        let alphabet = Array("{}[]\",:\\/ \n0123456789-+.eEtrufalsn\\u00d8ude".utf8) + [0x00, 0x1F, 0x80, 0xC3, 0xED, 0xFF]
        for _ in 0..<3000 {
            let length = Int.random(in: 0...40, using: &generator)
            let bytes = (0..<length).map { _ in alphabet.randomElement(using: &generator)! }
            _ = try? JSONParser.parse(bytes)
        }
    }

    @Test func objectMembersComeWithTheirBytes() throws {
        let text = #" {"a" : {"b": [1, {"c": 2}]}, "s":"x\"y", "n": -1.5e3 ,"e":{}} "#
        let bytes = Array(text.utf8)
        let (members, ranges) = try JSONParser.parseObject(bytes)
        #expect(Set(ranges.keys) == ["a", "s", "n", "e"], "the top level's members only")
        for (key, range) in ranges {
            // Each range holds exactly that member's value, which parses back to it.
            #expect(try JSONParser.parse(Array(bytes[range])) == members[key], "\(key)")
        }
        #expect(String(decoding: bytes[ranges["s"]!], as: UTF8.self) == #""x\"y""#)
        #expect(String(decoding: bytes[ranges["n"]!], as: UTF8.self) == "-1.5e3")
        for notObject in ["[1]", "\"s\"", "1", "null"] {
            #expect(throws: JSONParseError(offset: 0, problem: JSONParser.notAnObject)) { try JSONParser.parseObject(Array(notObject.utf8)) }
        }
        #expect(throws: JSONParseError.self) { try JSONParser.parseObject(Array("{\"a\":1".utf8)) }
    }
}
