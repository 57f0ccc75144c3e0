import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing

@Suite struct DigestTests {
    private static let toHex = "od -An -v -tx1 | tr -d ' \\n'"

    @Test func sha256KnownVectors() {
        #expect(Hex.encode(Digest.sha256([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Hex.encode(Digest.sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Hex.encode(Digest.sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
            == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(Digest.sha256("abc") == Digest.sha256(Array("abc".utf8)))
    }

    @Test func sha256AgainstOpenSSLCLI() throws {
        var generator = SeededGenerator(seed: 0x5A256)
        try withTemporaryDirectory { directory in
            // Lengths around the 64-byte block and the 55/56-byte padding boundary.
            for length in [0, 1, 55, 56, 63, 64, 65, 1000, 100_000] {
                let bytes = generator.bytes(length)
                let file = directory.appendingPathComponent("in-\(length)")
                try file.write(bytes)
                let expected = try Shell.run("openssl dgst -sha256 -binary \"$1\" | \(Self.toHex)", [file.path])
                #expect(Hex.encode(Digest.sha256(bytes)) == expected, "length \(length)")
            }
            // Text, hashed as its UTF-8 bytes.
            let text = "Zoë@Example.COM ✉️"
            let file = directory.appendingPathComponent("text")
            try file.write(text)
            #expect(Hex.encode(Digest.sha256(text)) == (try Shell.run("openssl dgst -sha256 -binary \"$1\" | \(Self.toHex)", [file.path])))
        }
    }

    @Test func sha1KnownVectorsAndCLI() throws {
        // FIPS 180-2 appendix A.
        #expect(Hex.encode(Digest.sha1([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(Hex.encode(Digest.sha1(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Hex.encode(Digest.sha1(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
            == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        var generator = SeededGenerator(seed: 0x5A1)
        try withTemporaryDirectory { directory in
            for length in [1, 55, 56, 64, 1000] {
                let bytes = generator.bytes(length)
                let file = directory.appendingPathComponent("in-\(length)")
                try file.write(bytes)
                let expected = try Shell.run("openssl dgst -sha1 -binary \"$1\" | \(Self.toHex)", [file.path])
                #expect(Hex.encode(Digest.sha1(bytes)) == expected, "length \(length)")
            }
        }
    }

    @Test func hmacRFC4231Vectors() {
        // Test case 1.
        #expect(Hex.encode(Digest.hmacSHA256(key: [UInt8](repeating: 0x0b, count: 20), message: Array("Hi There".utf8)))
            == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        // Test case 2.
        #expect(Hex.encode(Digest.hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8)))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Test case 6: a key longer than the block size is hashed first.
        #expect(Hex.encode(Digest.hmacSHA256(key: [UInt8](repeating: 0xaa, count: 131),
                                             message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)))
            == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test func hmacAgainstOpenSSLCLI() throws {
        var generator = SeededGenerator(seed: 0x4AC)
        try withTemporaryDirectory { directory in
            // Text keys through -hmac.
            for (key, length) in [("k", 0), ("secret key", 10), ("ens/v1/device-token-hash", 64), (String(repeating: "K", count: 70), 200)] {
                let message = generator.bytes(length)
                let file = directory.appendingPathComponent("m-\(length)")
                try file.write(message)
                let expected = try Shell.run("openssl dgst -sha256 -hmac \"$2\" -binary \"$1\" | \(Self.toHex)", [file.path, key])
                #expect(Hex.encode(Digest.hmacSHA256(key: Array(key.utf8), message: message)) == expected, "key \(key)")
            }
            // Binary keys of lengths around the 64-byte block through -macopt hexkey.
            for keyLength in [1, 32, 63, 64, 65, 131] {
                let key = generator.bytes(keyLength)
                let message = generator.bytes(keyLength * 3)
                let file = directory.appendingPathComponent("b-\(keyLength)")
                try file.write(message)
                let expected = try Shell.run("openssl dgst -sha256 -mac HMAC -macopt \"hexkey:$2\" -binary \"$1\" | \(Self.toHex)",
                                             [file.path, Hex.encode(key)])
                #expect(Hex.encode(Digest.hmacSHA256(key: key, message: message)) == expected, "key length \(keyLength)")
            }
        }
    }

    @Test func hmacAgainstPython() throws {
        // Includes the empty key, which the CLI cannot express.
        var generator = SeededGenerator(seed: 0x9E)
        let program = """
            import hashlib, hmac, sys
            print(hmac.new(bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2]), hashlib.sha256).hexdigest())
            """
        for (keyLength, messageLength) in [(0, 0), (0, 10), (32, 0), (32, 32), (100, 5)] {
            let key = generator.bytes(keyLength)
            let message = generator.bytes(messageLength)
            let expected = try Shell.python(program, [Hex.encode(key), Hex.encode(message)])
            #expect(Hex.encode(Digest.hmacSHA256(key: key, message: message)) == expected)
        }
    }

    @Test func constantTimeEqual() {
        #expect(Digest.constantTimeEqual([], []))
        #expect(Digest.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!Digest.constantTimeEqual([1, 2, 3], [1, 2]))
        #expect(!Digest.constantTimeEqual([1, 2], [1, 2, 3]))
        #expect(!Digest.constantTimeEqual([], [0]))
        #expect(!Digest.constantTimeEqual([0], []))
        #expect(!Digest.constantTimeEqual([0], [1]))
        let base = (0..<64).map { UInt8($0) }
        #expect(Digest.constantTimeEqual(base, base))
        for index in base.indices {
            for flip: UInt8 in [0x01, 0x80] {
                var other = base
                other[index] ^= flip
                #expect(!Digest.constantTimeEqual(base, other), "differs at \(index)")
            }
        }
        // A prefix is not equal, in either order.
        #expect(!Digest.constantTimeEqual(Array(base.prefix(63)), base))
        #expect(!Digest.constantTimeEqual(base, Array(base.prefix(63))))
    }

    @Test func randomBytes() throws {
        #expect(try Digest.randomBytes(0) == [])
        #expect(try Digest.randomBytes(1).count == 1)
        #expect(try Digest.randomBytes(1000).count == 1000)
        // Two 32-byte draws colliding would mean a broken generator.
        #expect(try Digest.randomBytes(32) != Digest.randomBytes(32))
    }
}

@Suite struct HexTests {
    @Test func encodesLowercase() {
        #expect(Hex.encode([]) == "")
        #expect(Hex.encode([0x00, 0x01, 0x7f, 0x80, 0xab, 0xff]) == "00017f80abff")
    }

    @Test func roundTripOfEveryByte() {
        let all = (0...255).map { UInt8($0) }
        let encoded = Hex.encode(all)
        #expect(encoded.utf8.count == 512)
        #expect(encoded == all.map { String(format: "%02x", $0) }.joined())
        #expect(Hex.decode(encoded) == all)
        #expect(Hex.decode(encoded.uppercased()) == all)
    }

    @Test func decodesEitherCase() {
        #expect(Hex.decode("ABcdEf") == [0xab, 0xcd, 0xef])
        #expect(Hex.decode("aB") == [0xab])
        #expect(Hex.decode("") == [])
    }

    @Test(arguments: ["0", "abc", "12345", "f", "0000000"])
    func oddLengthIsRefused(text: String) {
        #expect(Hex.decode(text) == nil)
    }

    @Test(arguments: ["0g", "g0", "zz", " 0", "0 ", "0x00", "-1", "+1", "é", "00é0", "\u{0}0", "0\n", "１２", "٠٠", "GG", ":;", "@A", "`a", "/0"])
    func badCharactersAreRefused(text: String) {
        #expect(Hex.decode(text) == nil)
    }
}
