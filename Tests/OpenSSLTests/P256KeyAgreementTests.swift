import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing

/// P-256 keys for ECDH and HKDF-SHA256, against RFC 5869's vectors, the openssl CLI and
/// Python's `cryptography`.
@Suite struct P256KeyAgreementTests {
    /// RFC 6979 A.2.5's P-256 key: a scalar with a published public point.
    static let rfc6979Scalar = "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721"
    static let rfc6979Point = "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6"
        + "7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299"
    /// The order n of P-256.
    static let order = "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551"

    static func bytes(_ hex: String) -> [UInt8] { Hex.decode(hex) ?? [] }

    /// The fixed P-256 SubjectPublicKeyInfo header and `point`, unchecked: how a test
    /// builds one that holds a bad point.
    static func uncheckedSubjectPublicKeyInfo(_ point: [UInt8]) -> [UInt8] {
        bytes("3059301306072a8648ce3d020106082a8648ce3d030107034200") + point
    }

    // MARK: HKDF

    /// RFC 5869 appendix A.1–A.3 (the SHA-256 cases): basic, long inputs, empty salt and info.
    @Test(arguments: [
        ("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "000102030405060708090a0b0c", "f0f1f2f3f4f5f6f7f8f9", 42,
         "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"),
        (Hex.encode(Array(0x00...0x4f)), Hex.encode(Array(0x60...0xaf)), Hex.encode(Array(0xb0...0xff)), 82,
         "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09"
            + "da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"),
        ("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "", "", 42,
         "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"),
    ])
    func hkdfMatchesRFC5869(ikm: String, salt: String, info: String, length: Int, okm: String) throws {
        let output = try HKDF.sha256(ikm: Self.bytes(ikm), salt: Self.bytes(salt), info: Self.bytes(info), length: length)
        #expect(Hex.encode(output) == okm)
    }

    @Test func hkdfRefusesWhatItCannotDerive() {
        for (ikm, length) in [([UInt8](), 32), ([1], 0), ([1], HKDF.maximumSHA256Length + 1)] {
            #expect(throws: OpenSSLError.self, "\(ikm.count) \(length)") { try HKDF.sha256(ikm: ikm, salt: [], info: [], length: length) }
        }
        #expect(throws: OpenSSLError.self) { try HKDF.sha256(ikm: [1], salt: [], info: [UInt8](repeating: 0, count: 1025), length: 32) }
        #expect((try? HKDF.sha256(ikm: [1], salt: [], info: [], length: HKDF.maximumSHA256Length))?.count == HKDF.maximumSHA256Length)
    }

    // MARK: Keys

    @Test func rawPrivateKeyGivesThePublishedPoint() throws {
        let key = try P256KeyAgreementKey(rawPrivateKey: Self.bytes(Self.rfc6979Scalar))
        #expect(Hex.encode(key.publicKey.x963) == Self.rfc6979Point)
        #expect(key.publicKey == (try P256PublicKey(bytes: Self.bytes(Self.rfc6979Point))))
        // Written as PKCS#8 and read back: the same key.
        #expect(try P256KeyAgreementKey(pem: try key.pem).publicKey == key.publicKey)
    }

    @Test func rawPrivateKeyOutOfRangeIsRefused() {
        let orderMinusOne = Hex.decode("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632550") ?? []
        #expect((try? P256KeyAgreementKey(rawPrivateKey: orderMinusOne)) != nil)
        for scalar in [[UInt8](repeating: 0, count: 32), Self.bytes(Self.order), [UInt8](repeating: 0xFF, count: 32),
                       [UInt8](repeating: 1, count: 31), [UInt8](repeating: 1, count: 33)] {
            #expect(throws: OpenSSLError.self, "\(Hex.encode(scalar))") { try P256KeyAgreementKey(rawPrivateKey: scalar) }
        }
    }

    @Test func readsPEMKeysMadeByTheOpenSSLCommand() throws {
        let pkcs8 = try Shell.genpkey("-algorithm EC -pkeyopt ec_paramgen_curve:P-256")
        let sec1 = try Shell.run("printf '%s\\n' \"$1\" | openssl ec 2>/dev/null", [pkcs8])
        #expect(sec1.hasPrefix("-----BEGIN EC PRIVATE KEY-----"))
        let expected = try Shell.publicKeyDER(pem: pkcs8)
        for pem in [pkcs8, sec1] {
            let key = try P256KeyAgreementKey(pem: pem)
            #expect(key.publicKey.subjectPublicKeyInfo == expected)
            #expect(try P256PublicKey(bytes: expected) == key.publicKey)
        }
    }

    @Test func otherCurvesAndAlgorithmsAreRefusedAsPrivateKeys() throws {
        for options in ["-algorithm EC -pkeyopt ec_paramgen_curve:P-384", "-algorithm EC -pkeyopt ec_paramgen_curve:secp256k1",
                        "-algorithm x25519"] {
            let pem = try Shell.genpkey(options)
            #expect(throws: OpenSSLError.self, "\(options)") { try P256KeyAgreementKey(pem: pem) }
        }
    }

    /// Python makes the key pair; both of its public forms read as the same point, and
    /// its scalar gives the same key here.
    @Test func publicKeyFormsAgreeWithPython() throws {
        let program = """
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
            key = ec.generate_private_key(ec.SECP256R1())
            public = key.public_key()
            print(format(key.private_numbers().private_value, '064x'))
            print(public.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint).hex())
            print(public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo).hex())
            """
        let lines = try Shell.python(program).split(separator: "\n").map { Self.bytes(String($0)) }
        try #require(lines.count == 3)
        let fromPoint = try P256PublicKey(bytes: lines[1])
        let fromSPKI = try P256PublicKey(bytes: lines[2])
        #expect(fromPoint.x963 == lines[1] && fromSPKI.x963 == lines[1])
        #expect(fromPoint.subjectPublicKeyInfo == lines[2])
        #expect(try P256KeyAgreementKey(rawPrivateKey: lines[0]).publicKey == fromPoint)
    }

    @Test func badPublicKeysAreRefused() throws {
        let point = Self.bytes(Self.rfc6979Point)
        let spki = try P256PublicKey(bytes: point).subjectPublicKeyInfo
        var offCurve = point
        offCurve[64] ^= 1
        // The same SubjectPublicKeyInfo naming prime192v1 (…3.1.1) instead of prime256v1.
        var otherCurveOID = spki
        otherCurveOID[22] = 0x01
        let compressed = [0x02 | (point[64] & 1)] + Array(point[1...32])
        let cases: [(String, [UInt8])] = [
            ("empty", []),
            ("64 bytes", Array(point.dropFirst())),
            ("66 bytes", point + [0]),
            ("wrong prefix", [0x05] + point.dropFirst()),
            ("not on the curve", [0x04] + [UInt8](repeating: 1, count: 64)),
            ("zeros", [0x04] + [UInt8](repeating: 0, count: 64)),
            ("flipped y bit", offCurve),
            ("compressed", compressed),
            ("spki off the curve", Self.uncheckedSubjectPublicKeyInfo(offCurve)),
            ("spki with a trailing byte", spki + [0]),
            ("spki naming another curve", otherCurveOID),
            ("91 bytes of garbage", [UInt8](repeating: 0x30, count: 91)),
            ("P-384 spki", try Shell.publicKeyDER(pem: try Shell.genpkey("-algorithm EC -pkeyopt ec_paramgen_curve:P-384"))),
            ("secp256k1 spki", try Shell.publicKeyDER(pem: try Shell.genpkey("-algorithm EC -pkeyopt ec_paramgen_curve:secp256k1"))),
        ]
        for (name, bytes) in cases {
            #expect(throws: OpenSSLError.self, "\(name)") { try P256PublicKey(bytes: bytes) }
        }
        do throws(OpenSSLError) {
            _ = try P256PublicKey(bytes: compressed)
        } catch {
            #expect(error.reasons.joined().contains("compressed"), "\(error)")
        }
    }

    // MARK: ECDH

    @Test func sharedSecretIsSymmetricAnd32Bytes() throws {
        let a = try P256KeyAgreementKey.generate()
        let b = try P256KeyAgreementKey.generate()
        let ab = try a.sharedSecret(with: b.publicKey)
        #expect(ab.count == 32)
        #expect(ab == (try b.sharedSecret(with: a.publicKey)))
        #expect(ab != (try a.sharedSecret(with: try P256KeyAgreementKey.generate().publicKey)))
        #expect(a.publicKey != b.publicKey)
    }

    /// Python's ECDH of the same two keys gives the same Z.
    @Test func sharedSecretMatchesPython() throws {
        let program = """
            import sys
            from cryptography.hazmat.primitives.asymmetric import ec
            private = ec.derive_private_key(int(sys.argv[1], 16), ec.SECP256R1())
            for point in sys.argv[2:]:
                peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), bytes.fromhex(point))
                print(private.exchange(ec.ECDH(), peer).hex())
            """
        var generator = SeededGenerator(seed: 0xEC0D)
        let scalar = generator.bytes(32)  // below n with overwhelming odds; the init would refuse otherwise
        let key = try P256KeyAgreementKey(rawPrivateKey: scalar)
        let peers = try (0..<5).map { _ in try P256KeyAgreementKey.generate() }
        let expected = try Shell.python(program, [Hex.encode(scalar)] + peers.map { Hex.encode($0.publicKey.x963) })
        #expect(expected == (try peers.map { Hex.encode(try key.sharedSecret(with: $0.publicKey)) }.joined(separator: "\n")))
    }
}
