import ENSTestSupport
import Foundation
import OpenSSL
import Testing

/// What RSAPrivateKey reads and writes, pinned against the openssl CLI: its PKCS#8 DER,
/// its public key PEM, and its implicit-rejection secret (SHA-256 over a label and the
/// key's PKCS#1 DER), which must stay the same for a given key: the stand-in for a
/// sealed block that does not open is derived from it.
@Suite struct RSAPrivateKeyTests {
    @Test func writesWhatTheOpenSSLCommandWrites() throws {
        let key = TestKeys.primary
        try withTemporaryDirectory { directory in
            try directory.appendingPathComponent("key.der").write(try key.derRepresentation)
            _ = try Shell.run("""
                cd "$1" && openssl pkcs8 -topk8 -nocrypt -inform DER -in key.der -outform DER -out pkcs8.der && \
                openssl pkey -inform DER -in key.der -pubout -out pub.pem && \
                openssl rsa -inform DER -in key.der -traditional -outform DER -out pkcs1.der 2>/dev/null
                """, [directory.path])
            #expect(try key.derRepresentation == Array(Data(contentsOf: directory.appendingPathComponent("pkcs8.der"))))
            #expect(try key.publicKeyPEM == String(contentsOf: directory.appendingPathComponent("pub.pem"), encoding: .utf8))
            let pkcs1 = Array(try Data(contentsOf: directory.appendingPathComponent("pkcs1.der")))
            #expect(key.rejectionSecret == Digest.sha256(Array("ENS implicit rejection v1".utf8) + pkcs1))
        }
    }

    @Test func readsPKCS1AndPKCS8DERFromTheOpenSSLCommand() throws {
        try withTemporaryDirectory { directory in
            _ = try Shell.run("""
                cd "$1" && openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out key.pem 2>/dev/null && \
                openssl pkcs8 -topk8 -nocrypt -in key.pem -outform DER -out pkcs8.der && \
                openssl rsa -in key.pem -traditional -outform DER -out pkcs1.der 2>/dev/null && \
                openssl pkey -in key.pem -pubout -out pub.pem
                """, [directory.path])
            let pkcs8 = Array(try Data(contentsOf: directory.appendingPathComponent("pkcs8.der")))
            let expectedPublic = try String(contentsOf: directory.appendingPathComponent("pub.pem"), encoding: .utf8)
            for name in ["pkcs8.der", "pkcs1.der"] {
                let key = try RSAPrivateKey(derRepresentation: Array(Data(contentsOf: directory.appendingPathComponent(name))))
                #expect(try key.publicKeyPEM == expectedPublic, "\(name)")
                #expect(try key.derRepresentation == pkcs8, "\(name)")
                #expect(key.modulusByteCount == 256, "\(name)")
            }
        }
    }

    @Test func generatesKeysOfTheAskedSize() throws {
        let a = try RSAPrivateKey.generate(bits: 1024)
        let b = try RSAPrivateKey.generate(bits: 1024)
        #expect(a.modulusByteCount == 128)
        #expect(try a.derRepresentation != b.derRepresentation)
        #expect(a.rejectionSecret != b.rejectionSecret)
        let reread = try RSAPrivateKey(derRepresentation: try a.derRepresentation)
        #expect(reread.rejectionSecret == a.rejectionSecret)
        #expect(try reread.publicKeyPEM == a.publicKeyPEM)
    }

    @Test func refusesAnECKeyAndGarbage() throws {
        let ecDER = try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("ec.der").path
            _ = try Shell.run("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -outform DER -out \"$1\" 2>/dev/null", [path])
            return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        }
        do throws(OpenSSLError) {
            _ = try RSAPrivateKey(derRepresentation: ecDER)
            Issue.record("accepted an EC key")
        } catch {
            #expect(error.reasons == ["not an RSA key"], "\(error)")
        }
        let der = try TestKeys.primary.derRepresentation
        for bytes in [[], [0x30], Array(der.prefix(der.count / 2)), Array("garbage".utf8)] as [[UInt8]] {
            #expect(throws: OpenSSLError.self, "\(bytes.count) bytes") { try RSAPrivateKey(derRepresentation: bytes) }
        }
    }
}
