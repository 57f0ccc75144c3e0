import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing
@testable import ENSVault

/// `SealedParameter.open` against ciphertexts made by the openssl CLI, an independent
/// implementation of RSA PKCS#1 v1.5 encryption.
@Suite struct SealedParameterTests {
    static let k = 256
    static let chunkSize = 245  // k - 11

    // MARK: Helpers

    /// Raw RSA (no padding) of hand-built k-byte encoded messages, so a test decides
    /// exactly what the private-key operation will produce. Returns base64 of the
    /// concatenated ciphertexts.
    static func rawEncryptWithCLI(_ blocks: [[UInt8]], for key: RSAPrivateKey) throws -> String {
        try withTemporaryDirectory { directory in
            try directory.appendingPathComponent("pub.pem").write(try key.publicKeyPEM)
            for (index, block) in blocks.enumerated() {
                precondition(block.count == k)
                try directory.appendingPathComponent(String(format: "block%03d.bin", index)).write(block)
            }
            return try Shell.run("""
                cd "$1" || exit 1
                for f in block*.bin; do
                    openssl pkeyutl -encrypt -pubin -inkey pub.pem -pkeyopt rsa_padding_mode:none -in "$f" -out "$f.enc" || exit 1
                done
                cat block*.bin.enc | base64 -w0
                """, [directory.path])
        }
    }

    /// 0x00 0x02 ‖ PS ‖ 0x00 ‖ message, k bytes, PS non-zero.
    static func encodedMessage(_ message: [UInt8], generator: inout SeededGenerator) -> [UInt8] {
        let padding = (0..<(k - 3 - message.count)).map { _ in UInt8.random(in: 1...255, using: &generator) }
        return [0x00, 0x02] + padding + [0x00] + message
    }

    private func expectRejected(_ text: String, with key: RSAPrivateKey = TestKeys.primary,
                                sourceLocation: SourceLocation = #_sourceLocation) {
        let (plaintext, valid) = SealedParameter.open(text, with: key, maximumBlocks: SealedParameter.maximumBlocks)
        #expect(!valid, sourceLocation: sourceLocation)
        // The stand-in is the same for the same input: nothing to average over.
        #expect(SealedParameter.open(text, with: key, maximumBlocks: SealedParameter.maximumBlocks).plaintext == plaintext,
                sourceLocation: sourceLocation)
    }

    // MARK: Against the openssl CLI

    @Test func keySize() {
        #expect(TestKeys.primary.modulusByteCount == Self.k)
    }

    @Test(arguments: [1, 245, 246, 700])
    func opensCLICiphertexts(length: Int) throws {
        var generator = SeededGenerator(seed: UInt64(length))
        let plaintext = generator.bytes(length)
        let sealed = try Shell.sealWithCLI(plaintext, for: TestKeys.primary)
        let chunks = (length + Self.chunkSize - 1) / Self.chunkSize
        #expect(Base64.decodeLenient(sealed)?.count == chunks * Self.k)

        let (opened, valid) = SealedParameter.open(sealed, with: TestKeys.primary)
        #expect(valid)
        #expect(opened == plaintext)
    }

    @Test func opensTextPlaintextsAndTheTransportManglingsOfBase64() throws {
        let plaintext = Array(#"{"password":"correct horse battery staple","server":"mail.example.com"}"#.utf8)
            + Array(repeating: UInt8(ascii: "x"), count: 300)
        let wrapped = try Shell.sealWithCLI(plaintext, for: TestKeys.primary, wrapped: true)
        #expect(wrapped.contains("\n"))
        let oneLine = wrapped.replacingOccurrences(of: "\n", with: "")
        let variants = [
            wrapped,                                                    // line breaks
            wrapped.replacingOccurrences(of: "\n", with: "\r\n"),
            oneLine.replacingOccurrences(of: "+", with: " "),           // form-decoded '+'
            String(oneLine.prefix { $0 != "=" }),                       // padding dropped
        ]
        for text in variants {
            let (opened, valid) = SealedParameter.open(text, with: TestKeys.primary)
            #expect(valid)
            #expect(opened == plaintext)
        }
    }

    @Test func wrongKeyIsRejected() throws {
        // Three blocks, so the (already negligible) chance that a wrong-key decryption
        // looks well padded is cubed.
        var generator = SeededGenerator(seed: 0x3)
        let sealed = try Shell.sealWithCLI(generator.bytes(700), for: TestKeys.primary)
        #expect(SealedParameter.open(sealed, with: TestKeys.primary).valid)
        expectRejected(sealed, with: TestKeys.secondary)
    }

    @Test func randomBlocksAreRejected() {
        var generator = SeededGenerator(seed: 0x4A4D)
        // Two random blocks: the chance that both decrypt to valid padding is ~1e-10.
        expectRejected(Base64.encode(generator.bytes(2 * Self.k)))
        // A block at least as large as any modulus cannot be decrypted at all.
        expectRejected(Base64.encode([UInt8](repeating: 0xFF, count: Self.k)))
        // All zeros decrypts to zero: no 0x02, no padding.
        expectRejected(Base64.encode([UInt8](repeating: 0, count: Self.k)))
    }

    @Test func randomLookingBlockWithKnownBadPaddingIsRejected() throws {
        // A ciphertext that is as random as any other, but whose decryption is known to
        // start 0x00 0x00, so the outcome does not depend on luck.
        var generator = SeededGenerator(seed: 0xBAD)
        let block = [0x00, 0x00] + generator.bytes(Self.k - 2)
        expectRejected(try Self.rawEncryptWithCLI([block], for: TestKeys.primary))
    }

    @Test(arguments: [0, 1, 100, 255, 257, 511, 513])
    func wrongLengthsAreRejected(length: Int) {
        var generator = SeededGenerator(seed: UInt64(length) + 1000)
        expectRejected(Base64.encode(generator.bytes(length)))
    }

    @Test(arguments: ["", "!!!!", "not base64 at all", "QQ==QQ==", "Q", "Zm9v-_", "\u{0}"])
    func malformedBase64IsRejected(text: String) {
        expectRejected(text)
    }

    @Test func wrongLengthAfterAValidCiphertextIsRejected() throws {
        let sealed = try Shell.sealWithCLI(Array("hello".utf8), for: TestKeys.primary)
        var bytes = Base64.decodeLenient(sealed)!
        #expect(SealedParameter.open(Base64.encode(bytes), with: TestKeys.primary).valid)
        bytes.removeLast()
        expectRejected(Base64.encode(bytes))
        bytes.append(contentsOf: [0, 0])
        expectRejected(Base64.encode(bytes))
    }

    @Test func everyTamperedByteOfAValidCiphertextIsRejected() throws {
        // A sample of positions (every byte would cost k RSA operations; a stride keeps
        // this fast while covering the start, the middle and the end).
        let sealed = try Shell.sealWithCLI(Array("a sealed secret".utf8), for: TestKeys.primary)
        let bytes = Base64.decodeLenient(sealed)!
        for position in stride(from: 0, to: Self.k, by: 15) + [Self.k - 1] {
            var tampered = bytes
            tampered[position] ^= 0x01
            let (plaintext, valid) = SealedParameter.open(Base64.encode(tampered), with: TestKeys.primary)
            // A flipped ciphertext bit decrypts to an unrelated block: valid padding has
            // probability ~1e-5 and would still not give back the original message.
            #expect(!valid || plaintext != Array("a sealed secret".utf8), "position \(position)")
        }
    }

    @Test func blockLimit() throws {
        let sealed = try Shell.sealWithCLI(Array("x".utf8), for: TestKeys.primary)
        let block = Base64.decodeLenient(sealed)!
        let atLimit = Array([[UInt8]](repeating: block, count: SealedParameter.maximumBlocks).joined())
        let (opened, valid) = SealedParameter.open(Base64.encode(atLimit), with: TestKeys.primary, maximumBlocks: SealedParameter.maximumBlocks)
        #expect(valid)
        #expect(opened == [UInt8](repeating: UInt8(ascii: "x"), count: SealedParameter.maximumBlocks))

        expectRejected(Base64.encode(atLimit + block))
        // Every parameter but `creds` has the small limit.
        let small = Array([[UInt8]](repeating: block, count: SealedParameter.maximumBlocksSmall).joined())
        #expect(SealedParameter.open(Base64.encode(small), with: TestKeys.primary).valid)
        #expect(!SealedParameter.open(Base64.encode(small + block), with: TestKeys.primary).valid)
    }

    // MARK: Implicit rejection per block

    /// A tampered last block after valid ones: the valid blocks' plaintext is handed on
    /// as it is, and only the failed block is replaced, by a stand-in derived from it.
    /// Whether the tampered block's padding happened to be valid or not, a parser then
    /// walks the same prefix: the prefix attack learns nothing.
    @Test func aFailedBlockIsReplacedAloneAndTheValidPrefixStays() throws {
        let prefix = Array(String(repeating: "p", count: 245).utf8)
        let sealed = try #require(Base64.decodeLenient(try Shell.sealWithCLI(prefix + Array("tail".utf8), for: TestKeys.primary)))
        #expect(sealed.count == 2 * Self.k)
        var tampered = sealed
        tampered[Self.k + 100] ^= 0x01
        let (plaintext, valid) = SealedParameter.open(Base64.encode(tampered), with: TestKeys.primary)
        #expect(!valid)
        #expect(Array(plaintext.prefix(245)) == prefix)
        let standIn = Array(plaintext.dropFirst(245))
        #expect(standIn != Array("tail".utf8))
        #expect(standIn == SealedParameter.syntheticMessage(for: Array(tampered[Self.k...]), secret: TestKeys.primary.rejectionSecret,
                                                           maximumLength: Self.k - 11))
        // Another tampering of the same block gets another stand-in; the same one the same.
        var other = sealed
        other[Self.k + 101] ^= 0x01
        #expect(SealedParameter.open(Base64.encode(other), with: TestKeys.primary).plaintext.dropFirst(245) != standIn[...])
        #expect(SealedParameter.open(Base64.encode(tampered), with: TestKeys.primary).plaintext == plaintext)
    }

    /// Stand-ins depend on the key's secret: another key makes another one of the same block.
    @Test func standInsDependOnTheKey() throws {
        let block = [UInt8](repeating: 7, count: Self.k)
        let one = SealedParameter.syntheticMessage(for: block, secret: TestKeys.primary.rejectionSecret, maximumLength: 245)
        let two = SealedParameter.syntheticMessage(for: block, secret: TestKeys.secondary.rejectionSecret, maximumLength: 245)
        #expect(one != two)
        #expect(one.count <= 245 && two.count <= 245)
        #expect(TestKeys.primary.rejectionSecret != TestKeys.secondary.rejectionSecret)
    }

    // MARK: Hand-built encoded messages through real RSA

    @Test func handBuiltPaddingThroughRSA() throws {
        var generator = SeededGenerator(seed: 0xE11)
        let message = Array("message".utf8)
        let good = Self.encodedMessage(message, generator: &generator)

        let longest = generator.bytes(Self.chunkSize)  // PS of exactly 8 bytes
        for expected in [message, [], longest, [0x00], [0x00, 0x00, 0x01]] {
            let block = Self.encodedMessage(expected, generator: &generator)
            let (opened, valid) = SealedParameter.open(try Self.rawEncryptWithCLI([block], for: TestKeys.primary), with: TestKeys.primary)
            #expect(valid, "message of \(expected.count) bytes")
            #expect(opened == expected)
        }

        var typeOne = good
        typeOne[1] = 0x01
        var leadingNonZero = good
        leadingNonZero[0] = 0x01
        var noSeparator = good
        noSeparator[Self.k - message.count - 1] = 0x55
        var shortPadding = [UInt8](repeating: 0x77, count: Self.k)
        shortPadding[0] = 0
        shortPadding[1] = 2
        shortPadding[9] = 0  // PS of 7 bytes
        for bad in [typeOne, leadingNonZero, noSeparator, shortPadding] {
            expectRejected(try Self.rawEncryptWithCLI([bad], for: TestKeys.primary))
        }

        // One bad block among good ones spoils the whole parameter.
        let mixed = try Self.rawEncryptWithCLI([good, typeOne, good], for: TestKeys.primary)
        expectRejected(mixed)
        let allGood = try Self.rawEncryptWithCLI([good, good, good], for: TestKeys.primary)
        #expect(SealedParameter.open(allGood, with: TestKeys.primary) == (message + message + message, true))
    }

    // MARK: unpadType2

    private static func block(paddingLength: Int, message: [UInt8], filler: UInt8 = 0xA5) -> [UInt8] {
        [0x00, 0x02] + [UInt8](repeating: filler, count: paddingLength) + [0x00] + message
    }

    @Test func unpadValid() {
        let message = Array("hi".utf8)
        let encoded = Self.block(paddingLength: 8, message: message)
        let (valid, start) = SealedParameter.unpadType2(encoded)
        #expect(valid == 0xFF)
        #expect(start == 11)
        #expect(Array(encoded[start...]) == message)

        let long = Self.block(paddingLength: 200, message: [0, 1, 0, 2])
        let (longValid, longStart) = SealedParameter.unpadType2(long)
        #expect(longValid == 0xFF)
        #expect(Array(long[longStart...]) == [0, 1, 0, 2], "zeros inside the message are data")
    }

    @Test func unpadPaddingLengthBoundary() {
        for length in 0...7 {
            #expect(SealedParameter.unpadType2(Self.block(paddingLength: length, message: [1, 2, 3])).valid == 0, "PS of \(length)")
        }
        for length in 8...12 {
            #expect(SealedParameter.unpadType2(Self.block(paddingLength: length, message: [1, 2, 3])).valid == 0xFF, "PS of \(length)")
        }
    }

    @Test func unpadRefusesWrongHeader() {
        var first = Self.block(paddingLength: 8, message: [1])
        first[0] = 0x01
        #expect(SealedParameter.unpadType2(first).valid == 0)
        first[0] = 0x80
        #expect(SealedParameter.unpadType2(first).valid == 0)

        for second: UInt8 in [0x00, 0x01, 0x03, 0x12, 0x82, 0xFF] {
            var encoded = Self.block(paddingLength: 8, message: [1])
            encoded[1] = second
            #expect(SealedParameter.unpadType2(encoded).valid == 0, "second byte \(second)")
        }
    }

    @Test func unpadRefusesMissingSeparator() {
        let encoded: [UInt8] = [0x00, 0x02] + [UInt8](repeating: 0x11, count: 40)
        #expect(SealedParameter.unpadType2(encoded).valid == 0)
    }

    @Test func unpadEmptyMessage() {
        let encoded = Self.block(paddingLength: 20, message: [])
        let (valid, start) = SealedParameter.unpadType2(encoded)
        #expect(valid == 0xFF)
        #expect(start == encoded.count)
        // The shortest valid block: header, 8 bytes of PS, separator.
        let shortest = Self.block(paddingLength: 8, message: [])
        #expect(shortest.count == 11)
        #expect(SealedParameter.unpadType2(shortest) == (0xFF, 11))
    }

    @Test func unpadTooShort() {
        for count in 0..<11 {
            var encoded = [UInt8](repeating: 0x33, count: count)
            if count > 0 { encoded[0] = 0 }
            if count > 1 { encoded[1] = 2 }
            if count > 2 { encoded[count - 1] = 0 }
            #expect(SealedParameter.unpadType2(encoded).valid == 0, "\(count) bytes")
        }
    }

    @Test func unpadUsesTheFirstZero() {
        // PS is 9 bytes; the message itself starts with a zero and has more zeros.
        let encoded: [UInt8] = [0x00, 0x02] + [UInt8](repeating: 1, count: 9) + [0x00, 0x00, 0x07, 0x00]
        let (valid, start) = SealedParameter.unpadType2(encoded)
        #expect(valid == 0xFF)
        #expect(Array(encoded[start...]) == [0x00, 0x07, 0x00])
    }

    @Test func constantTimeHelpers() {
        for byte in 0...255 {
            #expect(SealedParameter.isZero(UInt8(byte)) == (byte == 0 ? 0xFF : 0))
        }
        for a in 0..<40 {
            for b in 0..<40 {
                #expect(SealedParameter.lessThan(a, b) == (a < b ? 0xFF : 0))
            }
        }
        #expect(SealedParameter.lessThan(0, 1 << 40) == 0xFF)
        #expect(SealedParameter.select(0xFF, 7, 9) == 7)
        #expect(SealedParameter.select(0x00, 7, 9) == 9)
        #expect(SealedParameter.select(0xFF, 0, Int.max) == 0)
        #expect(SealedParameter.select(0x00, Int.max, 12345) == 12345)
        for value in [0, 1, -1, 32, -32, 255, 256, Int.max, Int.min] {
            #expect(SealedParameter.isZero(value) == (value == 0 ? 0xFF : 0), "\(value)")
        }
    }

    // MARK: Envelopes, against Python's cryptography

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Envelopes of `plaintexts` made by Tests/tools/seal.py (Python's `cryptography`:
    /// RSA PKCS#1 v1.5 of the key, AES-256-GCM of the plaintext), under `key`'s public key.
    static func envelopes(_ plaintexts: [String], for key: RSAPrivateKey = TestKeys.primary, keyLength: Int = 32) throws -> [String] {
        try withTemporaryDirectory { directory in
            try directory.appendingPathComponent("pub.pem").write(try key.publicKeyPEM)
            try JSONSerialization.data(withJSONObject: plaintexts).write(to: directory.appendingPathComponent("in.json"))
            let output = try Shell.run("exec python3 \"$1\" \"$2/pub.pem\" --envelope --key-length \"$3\" < \"$2/in.json\"",
                                       [root.appendingPathComponent("Tests/tools/seal.py").path, directory.path, String(keyLength)])
            return try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String])
        }
    }

    @Test func opensPythonEnvelopesUpToTheBlockLimitsPlaintext() throws {
        let small = SealedParameter.maximumBlocksSmall * Self.chunkSize
        let lengths = [0, 1, 245, 246, small]
        let plaintexts = lengths.map { String(repeating: "e", count: $0) } + [#"{"pushToken":"ab","purpose":"x.y","sealedAt":1}"#]
        for (plaintext, sealed) in zip(plaintexts, try Self.envelopes(plaintexts)) {
            #expect(sealed.hasPrefix(SealedParameter.envelopePrefix))
            let (opened, valid) = SealedParameter.open(sealed, with: TestKeys.primary)
            #expect(valid, "\(plaintext.count) bytes")
            #expect(opened == Array(plaintext.utf8))
        }
        // Past what the blocks allowed would hold: refused, as a chunked value would be.
        let over = try Self.envelopes([String(repeating: "e", count: small + 1)])[0]
        #expect(!SealedParameter.open(over, with: TestKeys.primary).valid)
        #expect(SealedParameter.open(over, with: TestKeys.primary, maximumBlocks: SealedParameter.maximumBlocks).valid)
    }

    @Test func anEnvelopeOpensOnlyWhole() throws {
        let sealed = try Self.envelopes([#"{"deviceSecret":"c2VjcmV0c2VjcmV0c2VjcmV0","purpose":"x.y","sealedAt":1}"#, "other"])
        let bytes = try #require(Base64.decodeLenient(String(sealed[0].dropFirst(3))))
        let other = try #require(Base64.decodeLenient(String(sealed[1].dropFirst(3))))
        func envelope(_ bytes: [UInt8]) -> String { SealedParameter.envelopePrefix + Base64.encode(bytes) }
        #expect(SealedParameter.open(envelope(bytes), with: TestKeys.primary).valid)
        // Any byte changed: the key block, the nonce, the ciphertext, the tag.
        for position in [0, Self.k - 1, Self.k, Self.k + 11, Self.k + 12, Self.k + 30, bytes.count - 16, bytes.count - 1] {
            var tampered = bytes
            tampered[position] ^= 0x01
            expectRejected(envelope(tampered))
        }
        // Another envelope's key block, a block added or taken away, a chunked value's
        // block appended, and the same bytes without the prefix.
        expectRejected(envelope(Array(other[..<Self.k]) + bytes[Self.k...]))
        expectRejected(envelope(bytes + Array(bytes[..<Self.k])))
        expectRejected(envelope(Array(bytes.dropLast())))
        expectRejected(envelope(Array(bytes.prefix(Self.k + 27))))
        let chunked = try #require(Base64.decodeLenient(try Shell.sealWithCLI(Array(" ".utf8), for: TestKeys.primary)))
        expectRejected(envelope(bytes + chunked))
        expectRejected(Base64.encode(bytes))
        // Under another key.
        expectRejected(sealed[0], with: TestKeys.secondary)
    }

    @Test(arguments: [0, 16, 31, 33, 64])
    func anEnvelopeWhoseKeyBlockIsNotAKeyIsRejected(keyLength: Int) throws {
        expectRejected(try Self.envelopes(["a value"], keyLength: keyLength)[0])
    }
}
