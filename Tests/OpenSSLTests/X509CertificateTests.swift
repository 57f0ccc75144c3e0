import ENSTestSupport
import Codecs
import Foundation
@testable import OpenSSL
import Testing

/// What ENS reads of a device's certificate, against Python's `cryptography` reading
/// the same bytes made by the openssl CLI.
@Suite struct X509CertificateTests {
    /// A self-signed certificate from the openssl CLI: DER bytes.
    static func certificate(in directory: URL, key: String, days: Int) throws -> [UInt8] {
        let path = directory.appendingPathComponent("c-\(UUID().uuidString.prefix(6)).der").path
        _ = try Shell.run("""
            openssl req -x509 -newkey "$1" -nodes -keyout "$2.key" -subj /CN=device -days "$3" -outform DER -out "$2" 2>/dev/null
            """, [key, path, String(days)])
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// {"bits", "notBefore", "notAfter", "sha1", "sha256"} as Python reads them.
    static func pythonView(_ der: [UInt8]) throws -> [String: Any] {
        let output = try Shell.python("""
            import sys, json, binascii
            from cryptography import x509
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import rsa
            c = x509.load_der_x509_certificate(binascii.unhexlify(sys.argv[1]))
            k = c.public_key()
            print(json.dumps({"bits": k.key_size if isinstance(k, rsa.RSAPublicKey) else 0,
                "notBefore": int(c.not_valid_before_utc.timestamp()), "notAfter": int(c.not_valid_after_utc.timestamp()),
                "sha1": c.fingerprint(hashes.SHA1()).hex(), "sha256": c.fingerprint(hashes.SHA256()).hex()}))
            """, [Hex.encode(der)])
        return try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
    }

    @Test func readsKeyDatesAndThumbprintsAsPythonDoes() throws {
        try withTemporaryDirectory { directory in
            for (key, days) in [("rsa:2048", 365), ("rsa:3072", 2), ("rsa:4096", 4000)] {
                let der = try Self.certificate(in: directory, key: key, days: days)
                let certificate = try X509Certificate(der: der)
                let python = try Self.pythonView(der)
                #expect(certificate.keyAlgorithm == .rsa(bits: (python["bits"] as? Int) ?? -1), "\(key)")
                #expect(certificate.notBefore == Int64((python["notBefore"] as? Int) ?? -1)
                    && certificate.notAfter == Int64((python["notAfter"] as? Int) ?? -1))
                #expect(Hex.encode(certificate.thumbprint.sha1) == python["sha1"] as? String)
                #expect(Hex.encode(certificate.thumbprint.sha256) == python["sha256"] as? String)
            }
            let ec = try X509Certificate(der: try Self.ecCertificate(in: directory))
            #expect(ec.keyAlgorithm == .other(name: "EC"))
        }
    }

    static func ecCertificate(in directory: URL) throws -> [UInt8] {
        let path = directory.appendingPathComponent("ec.der").path
        _ = try Shell.run("""
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -subj /CN=device -days 30 -outform DER -out \
            "$1" 2>/dev/null
            """, [path])
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    @Test func refusesAnythingButOneCertificate() throws {
        try withTemporaryDirectory { directory in
            let der = try Self.certificate(in: directory, key: "rsa:2048", days: 30)
            #expect(throws: OpenSSLError.self) { try X509Certificate(der: der + [0]) }
            #expect(throws: OpenSSLError.self) { try X509Certificate(der: Array(der.prefix(der.count - 1))) }
            #expect(throws: OpenSSLError.self) { try X509Certificate(der: Array("not a certificate".utf8)) }
        }
    }

    @Test func civilDatesMatchTheCalendar() {
        #expect(X509Certificate.epochSeconds(year: 1970, month: 1, day: 1) == 0)
        #expect(X509Certificate.epochSeconds(year: 2000, month: 3, day: 1) == 951_868_800)
        #expect(X509Certificate.epochSeconds(year: 2049, month: 12, day: 31) == 2_524_521_600)
    }
}
