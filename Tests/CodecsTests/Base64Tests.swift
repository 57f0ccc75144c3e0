import ENSTestSupport
import Codecs
import Foundation
import Testing

@Suite struct Base64Tests {
    @Test func rfc4648Vectors() {
        let vectors: [(String, String)] = [
            ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in vectors {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
            #expect(Base64.decodeLenient(encoded) == Array(plain.utf8))
        }
    }

    @Test func allAlphabetCharacters() {
        // 0xFB 0xEF 0xFF ... covers '+' and '/'.
        #expect(Base64.encode([0xFB, 0xFF, 0xBF]) == "+/+/")
        #expect(Base64.decodeLenient("+/+/") == [0xFB, 0xFF, 0xBF])
        let all = Array(0...255).map(UInt8.init)
        #expect(Base64.encode(all) == Data(all).base64EncodedString())
        #expect(Base64.decodeLenient(Base64.encode(all)) == all)
    }

    @Test func roundTripsAgainstFoundationForRandomLengths() {
        var generator = SeededGenerator(seed: 0xB64)
        for length in 0...300 {
            let bytes = generator.bytes(length)
            let encoded = Base64.encode(bytes)
            #expect(encoded == Data(bytes).base64EncodedString(), "length \(length)")
            #expect(Base64.decodeLenient(encoded) == bytes, "length \(length)")
            // Foundation must read what we write, and we must read what Foundation writes
            // with line breaks.
            #expect(Data(base64Encoded: encoded).map(Array.init) == bytes)
            let wrapped = Data(bytes).base64EncodedString(options: [.lineLength64Characters, .endLineWithCarriageReturn, .endLineWithLineFeed])
            #expect(Base64.decodeLenient(wrapped) == bytes, "length \(length), wrapped")
            let wrapped76 = Data(bytes).base64EncodedString(options: [.lineLength76Characters, .endLineWithLineFeed])
            #expect(Base64.decodeLenient(wrapped76) == bytes, "length \(length), wrapped at 76")
        }
    }

    @Test func paddingIsOptional() {
        var generator = SeededGenerator(seed: 0x9AD)
        for length in 0...64 {
            let bytes = generator.bytes(length)
            let unpadded = String(Base64.encode(bytes).prefix { $0 != "=" })
            #expect(Base64.decodeLenient(unpadded) == bytes, "length \(length)")
        }
        #expect(Base64.decodeLenient("QQ") == [0x41])
        #expect(Base64.decodeLenient("QUI") == [0x41, 0x42])
        #expect(Base64.decodeLenient("QUJD") == [0x41, 0x42, 0x43])
    }

    @Test func lineBreaksAndTabsAreIgnored() {
        #expect(Base64.decodeLenient("Zm9v\nYmFy") == Array("foobar".utf8))
        #expect(Base64.decodeLenient("Zm9v\r\nYmFy\r\n") == Array("foobar".utf8))
        #expect(Base64.decodeLenient("\tZ\tm\n9\rv") == Array("foo".utf8))
        #expect(Base64.decodeLenient("Zg=\n=") == Array("f".utf8))
        #expect(Base64.decodeLenient("Zg==\n") == Array("f".utf8))
        #expect(Base64.decodeLenient("\n\r\t") == [])
    }

    @Test func spaceIsReadAsPlus() {
        // What form decoding makes of an unescaped '+'.
        #expect(Base64.decodeLenient(" / /") == [0xFB, 0xFF, 0xBF])
        var generator = SeededGenerator(seed: 0x5ACE)
        for length in [1, 2, 3, 10, 100, 256] {
            let bytes = generator.bytes(length)
            let mangled = Base64.encode(bytes).replacingOccurrences(of: "+", with: " ")
            #expect(Base64.decodeLenient(mangled) == bytes)
        }
    }

    @Test func emptyInputDecodesToNothing() {
        #expect(Base64.decodeLenient("") == [])
        #expect(Base64.encode([]) == "")
    }

    @Test(arguments: [
        "-", "_", "Zm9v-A==", "Zm9v_w==", "Zm9v!", "Zm9v.YmFy", "Zm9v\u{0B}YmFy", "Zm9v\u{0}YmFy", "Zm9v\u{C}", "Zm9vé",
        "Zm9v\u{A0}", "Zm9v\u{FF21}", "%2B", "Zm9v,", "Zm9v*", "Zm9v\u{7F}",
    ])
    func garbageIsRefused(text: String) {
        #expect(Base64.decodeLenient(text) == nil)
    }

    @Test(arguments: ["QQ==QQ==", "QQ=A", "QQ==A", "QUI=Q", "QQ== QQ", "Zg==Zg", "=QQ", "==QQ", "=QQQ"])
    func dataAfterPaddingIsRefused(text: String) {
        #expect(Base64.decodeLenient(text) == nil)
    }

    @Test(arguments: ["Q", "QUJDR", "QUJDRUZHS", "Q===", "QUJDR===", "Q\n", "Q=="])
    func oneLeftoverCharacterIsRefused(text: String) {
        #expect(Base64.decodeLenient(text) == nil)
    }

    @Test(arguments: ["=", "==", "===", "====", "QQ=", "QQ===", "QUI==", "QUJD=", "QUJD==", "QQ=\n=\n="])
    func wrongPaddingIsRefused(text: String) {
        #expect(Base64.decodeLenient(text) == nil)
    }

    @Test func everyLengthModFour() {
        // 4n+1 sextets can never be valid; 4n, 4n+2, 4n+3 always are.
        for count in 0...40 {
            let text = String(repeating: "A", count: count)
            if count % 4 == 1 {
                #expect(Base64.decodeLenient(text) == nil, "\(count) characters")
            } else {
                #expect(Base64.decodeLenient(text) == [UInt8](repeating: 0, count: count * 3 / 4), "\(count) characters")
            }
        }
    }

    @Test func randomTextNeverTraps() {
        var generator = SeededGenerator(seed: 0x64)
        let alphabet = Array("AZaz09+/= \n\r\t-_!".utf8) + [0x00, 0x80, 0xFF]
        for _ in 0..<3000 {
            let bytes = (0..<Int.random(in: 0...20, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            let text = String(decoding: bytes, as: UTF8.self)
            if let decoded = Base64.decodeLenient(text) {
                // Whatever is accepted re-encodes to the same data.
                #expect(Base64.decodeLenient(Base64.encode(decoded)) == decoded)
            }
        }
    }

    @Test func urlSafeAgreesWithFoundationForRandomLengths() {
        // RFC 4648 §5 from Foundation's standard encoding: '+' and '/' swapped, padding cut.
        var generator = SeededGenerator(seed: 0x5AFE)
        for length in 0...300 {
            let bytes = generator.bytes(length)
            var foundation = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            while foundation.hasSuffix("=") { foundation.removeLast() }
            #expect(Base64.encodeURLSafe(bytes) == foundation, "length \(length)")
            #expect(Base64.decodeURLSafe(foundation) == bytes, "length \(length)")
            // Every character that is not of the alphabet, anywhere, is refused.
            if length > 0 {
                let position = Int(generator.bytes(1)[0]) % foundation.utf8.count
                for bad in ["=", "+", "/", " ", "\n", "é"] {
                    var broken = Array(foundation)
                    broken[position] = Character(bad)
                    #expect(Base64.decodeURLSafe(String(broken)) == nil, "length \(length), \(bad)")
                }
            }
        }
    }

    @Test func urlSafeDecodingAcceptsOnlyTheCanonicalSpelling() {
        // "QQ" is the only spelling of [0x41]: "QR".."QZ" differ only in the four unused
        // bits of the last character, which a lenient decoder would ignore.
        #expect(Base64.decodeURLSafe("QQ") == [0x41])
        for last in "RSTUVWXYZ" { #expect(Base64.decodeURLSafe("Q\(last)") == nil, "Q\(last)") }
        #expect(Base64.decodeURLSafe("QUI") == [0x41, 0x42])
        #expect(Base64.decodeURLSafe("QUJ") == nil)  // two unused bits set
        #expect(Base64.decodeURLSafe("-_8") == [0xFB, 0xFF])
        #expect(Base64.decodeURLSafe("+/8") == nil && Base64.decodeURLSafe("QQ==") == nil)
        var generator = SeededGenerator(seed: 0x65)
        for length in 0..<40 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(Base64.decodeURLSafe(Base64.encodeURLSafe(bytes)) == bytes)
        }
    }
}
