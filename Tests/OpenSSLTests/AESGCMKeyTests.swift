import ENSTestSupport
import Codecs
import OpenSSL
import Testing

@Suite struct AESGCMKeyTests {
    static let keyBytes: [UInt8] = (0..<32).map { UInt8($0 &* 7 &+ 3) }

    static func key() throws -> AESGCMKey { try AESGCMKey(bytes: keyBytes) }

    /// Python's `cryptography` (an independent AES-GCM) opens Swift's sealed layout
    /// nonce(12) ‖ ciphertext ‖ tag(16); prints the plaintext as hex.
    static let pythonOpen = """
        import sys
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        key, sealed, aad = (bytes.fromhex(a) for a in sys.argv[1:4])
        print(AESGCM(key).decrypt(sealed[:12], sealed[12:], aad or None).hex())
        """

    /// Python seals with a given nonce; prints nonce ‖ ciphertext ‖ tag as hex.
    static let pythonSeal = """
        import sys
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        key, nonce, plaintext, aad = (bytes.fromhex(a) for a in sys.argv[1:5])
        print((nonce + AESGCM(key).encrypt(nonce, plaintext, aad or None)).hex())
        """

    @Test(arguments: [0, 1, 15, 16, 17, 31, 32, 33, 255, 1000, 4096])
    func roundTrip(length: Int) throws {
        var generator = SeededGenerator(seed: UInt64(length))
        let key = try Self.key()
        let plaintext = generator.bytes(length)
        for associatedData in [[], Array("row:42".utf8), generator.bytes(100)] {
            let sealed = try key.seal(plaintext, associatedData: associatedData)
            #expect(sealed.count == AESGCMKey.nonceSize + length + AESGCMKey.tagSize)
            #expect(try key.open(sealed, associatedData: associatedData) == plaintext)
        }
    }

    @Test func defaultAssociatedDataIsEmpty() throws {
        let key = try Self.key()
        let sealed = try key.seal(Array("x".utf8))
        #expect(try key.open(sealed, associatedData: []) == Array("x".utf8))
        #expect(try key.open(try key.seal(Array("y".utf8), associatedData: [])) == Array("y".utf8))
    }

    @Test func noncesAreFresh() throws {
        let key = try Self.key()
        let plaintext = Array("same message".utf8)
        let sealed = try (0..<50).map { _ in try key.seal(plaintext) }
        #expect(Set(sealed.map { Array($0[0..<AESGCMKey.nonceSize]) }).count == sealed.count)
        #expect(Set(sealed).count == sealed.count)
    }

    @Test func everySingleByteTamperingFails() throws {
        let key = try Self.key()
        let associatedData = Array("context".utf8)
        let sealed = try key.seal(Array("attack at dawn!!!".utf8), associatedData: associatedData)
        for index in sealed.indices {
            for flip: UInt8 in [0x01, 0x80, 0xFF] {
                var tampered = sealed
                tampered[index] ^= flip
                #expect(throws: OpenSSLError.self, "byte \(index) ^ \(flip)") {
                    try key.open(tampered, associatedData: associatedData)
                }
            }
        }
    }

    @Test func tamperingAnEmptyPlaintextFails() throws {
        let key = try Self.key()
        let sealed = try key.seal([])
        #expect(sealed.count == 28)
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x40
            #expect(throws: OpenSSLError.self) { try key.open(tampered) }
        }
    }

    @Test func wrongAssociatedDataFails() throws {
        let key = try Self.key()
        let sealed = try key.seal(Array("secret".utf8), associatedData: Array("user:a".utf8))
        for other in ["user:b", "user:", "user:aa", "User:a", ""] {
            #expect(throws: OpenSSLError.self, "\(other)") { try key.open(sealed, associatedData: Array(other.utf8)) }
        }
        let unbound = try key.seal(Array("secret".utf8))
        #expect(throws: OpenSSLError.self) { try key.open(unbound, associatedData: [0]) }
    }

    @Test func truncationFails() throws {
        let key = try Self.key()
        let sealed = try key.seal(Array("a short secret".utf8))
        for length in 0..<sealed.count {
            #expect(throws: OpenSSLError.self, "\(length) bytes") { try key.open(Array(sealed[0..<length])) }
        }
        // Dropping bytes from the front fails too.
        #expect(throws: OpenSSLError.self) { try key.open(Array(sealed.dropFirst())) }
        // So do extra bytes.
        #expect(throws: OpenSSLError.self) { try key.open(sealed + [0]) }
    }

    @Test func wrongKeyFails() throws {
        let sealed = try Self.key().seal(Array("secret".utf8))
        var otherBytes = Self.keyBytes
        otherBytes[31] ^= 1
        #expect(throws: OpenSSLError.self) { try AESGCMKey(bytes: otherBytes).open(sealed) }
        #expect(throws: OpenSSLError.self) { try AESGCMKey.random().open(sealed) }
    }

    @Test func keyMustBe32Bytes() throws {
        for count in [0, 1, 16, 24, 31, 33, 64] {
            #expect(throws: OpenSSLError.self, "\(count) bytes") { try AESGCMKey(bytes: [UInt8](repeating: 1, count: count)) }
        }
        #expect(throws: Never.self) { try AESGCMKey(bytes: [UInt8](repeating: 1, count: 32)) }
    }

    @Test func derivedKeysAreDistinctAndDeterministic() throws {
        let key = try Self.key()
        let a = key.derived(label: "a")
        let sealed = try a.seal(Array("x".utf8))
        #expect(try key.derived(label: "a").open(sealed) == Array("x".utf8))
        #expect(throws: OpenSSLError.self) { try key.derived(label: "b").open(sealed) }
        #expect(throws: OpenSSLError.self) { try key.open(sealed) }
        #expect(key.derivedBytes(label: "a") == Digest.hmacSHA256(key: Self.keyBytes, message: Array("a".utf8)))
        #expect(key.derivedBytes(label: "a") != key.derivedBytes(label: "b"))
    }

    @Test func errorsDoNotCarryPlaintext() throws {
        let key = try Self.key()
        let sealed = try key.seal(Array("very-secret-value".utf8))
        do {
            _ = try key.open(sealed, associatedData: [1])
            Issue.record("expected a failure")
        } catch {
            #expect(!"\(error)".contains("very-secret-value"))
        }
    }

    // MARK: Cross-checks with Python's cryptography

    @Test func pythonOpensWhatSwiftSeals() throws {
        let key = try Self.key()
        var generator = SeededGenerator(seed: 0xAE5)
        for (length, associatedData) in [(0, [UInt8]()), (1, Array("pool".utf8)), (16, []),
                                         (77, generator.bytes(33)), (1000, Array("user:abc".utf8))] {
            let plaintext = generator.bytes(length)
            let sealed = try key.seal(plaintext, associatedData: associatedData)
            let opened = try Shell.python(Self.pythonOpen, [Hex.encode(Self.keyBytes), Hex.encode(sealed), Hex.encode(associatedData)])
            #expect(opened == Hex.encode(plaintext), "length \(length)")
        }
    }

    @Test func swiftOpensWhatPythonSeals() throws {
        let key = try Self.key()
        var generator = SeededGenerator(seed: 0x5EA1)
        for (length, associatedData) in [(0, [UInt8]()), (5, Array("device-token".utf8)), (300, generator.bytes(7))] {
            let plaintext = generator.bytes(length)
            let nonce = generator.bytes(12)
            let sealedHex = try Shell.python(Self.pythonSeal,
                                             [Hex.encode(Self.keyBytes), Hex.encode(nonce), Hex.encode(plaintext), Hex.encode(associatedData)])
            let sealed = try #require(Hex.decode(sealedHex))
            #expect(try key.open(sealed, associatedData: associatedData) == plaintext, "length \(length)")
            // Given Python's nonce, the package-only seal writes Python's bytes.
            #expect(try key.seal(plaintext, associatedData: associatedData, nonce: nonce) == sealed, "length \(length)")
            if !associatedData.isEmpty {
                #expect(throws: OpenSSLError.self) { try key.open(sealed) }
            }
        }
    }

    @Test func aGivenNonceMustBe12Bytes() throws {
        let key = try Self.key()
        for size in [0, 8, 11, 13, 16] {
            #expect(throws: OpenSSLError.self, "\(size)") { try key.seal([1], associatedData: [], nonce: [UInt8](repeating: 0, count: size)) }
        }
    }
}
