import ENSTestSupport
import Testing
@testable import ENSModel

@Suite struct DeviceTokenTests {
    /// The reading DeviceToken(hex:) had before it went byte by byte, kept here as the
    /// reference: drop `<…>`, drop spaces, lowercase, then require even hex of 16–200.
    static func reference(_ text: String) -> String? {
        var form = Substring(text)
        if form.hasPrefix("<") && form.hasSuffix(">") { form = form.dropFirst().dropLast() }
        let lower = form.filter { $0 != " " }.lowercased()
        guard lower.utf8.count >= 16, lower.utf8.count <= 200, lower.utf8.count % 2 == 0,
              lower.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else { return nil }
        return lower
    }

    @Test func readsEveryFormAsTheReferenceDoes() {
        let cases = [
            "a1b2c3d4e5f60718293a4b5c6d7e8f90",
            "A1B2C3D4E5F60718293A4B5C6D7E8F90",
            "<a1b2c3d4 e5f60718 293a4b5c 6d7e8f90>",
            "<A1B2C3D4 E5F60718 293A4B5C 6D7E8F90>",
            "<>", "<", ">", "", " ", "<a1b2c3d4e5f60718293a4b5c6d7e8f90",
            "a1b2c3d4e5f60718293a4b5c6d7e8f9",            // odd
            "a1b2c3d4e5f60718293a4b5c6d7e8f9g",           // not hex
            "a1b2c3d4e5f6071",                            // too short
            String(repeating: "ab", count: 100), String(repeating: "ab", count: 101),
            "a1b2c3d4e5f60718\t293a4b5c6d7e8f90",         // a tab is not a space
            "a1b2c3d4e5f60718 \u{301}293a4b5c6d7e8f90",    // a space carrying a combining mark
            "ａ1b2c3d4e5f60718293a4b5c6d7e8f90",           // fullwidth a
            "\u{212A}1b2c3d4e5f60718293a4b5c6d7e8f90",     // Kelvin sign lowercases to k
            "<<a1b2c3d4e5f60718293a4b5c6d7e8f90>>",
        ]
        for text in cases {
            #expect(DeviceToken(hex: text)?.value == Self.reference(text), "\(Array(text.utf8))")
        }
    }

    @Test func randomTextReadsAsTheReferenceDoes() {
        var generator = SeededGenerator(seed: 0x70CE)
        // Mostly lowercase hex (each digit listed four times), so many of the strings are tokens.
        let alphabet = Array(String(repeating: "0123456789abcdef", count: 4).unicodeScalars) + Array("ABCDEF <>gG\u{301}é".unicodeScalars)
        for _ in 0..<5_000 {
            let string = generator.text(from: alphabet, maximumLength: 70)
            #expect(DeviceToken(hex: string)?.value == Self.reference(string), "\(Array(string.utf8))")
        }
    }

    @Test func keepsTheStoredFormAsItIs() throws {
        let stored = "feedfacecafebeef00112233445566778899aabbccddeeff0011223344556677"
        let token = try #require(DeviceToken(hex: stored))
        #expect(token.value == stored && token.provider == .apns && token.storedForm == stored)
    }
}
