import Foundation
import OpenSSL
import Testing

/// A client-supplied PKCS#12 chooses its own key-derivation iteration counts. Bundles
/// made by the openssl CLI (an independent implementation) open as before; one that asks
/// for millions of iterations is refused before any derivation runs.
@Suite struct PKCS12BoundTests {
    /// A bundle from the openssl CLI with `iterations` for both the safes and the MAC:
    /// PBES2/PBKDF2 with AES (OpenSSL 3's default), or PKCS#12 PBE with 3DES and a SHA-1
    /// MAC (`legacy`, as older Windows exports are).
    static func bundle(iterations: Int, legacy: Bool = false) throws -> [UInt8] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("p12-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try Shell.run("""
            cd "$1" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out cert.pem \
              -subj /CN=client -days 2 2>/dev/null && \
            openssl pkcs12 -export -inkey key.pem -in cert.pem -out bundle.p12 -passout pass:secret -iter "$2" $3
            """, [directory, String(iterations), legacy ? "-certpbe PBE-SHA1-3DES -keypbe PBE-SHA1-3DES -macalg sha1" : ""])
        return Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/bundle.p12")))
    }

    /// Replaces every DER INTEGER `02 03 01 00 00` (65,536) by `02 03 7F FF FF`
    /// (8,388,607): the same bundle asking for 128 times the work, made without doing it.
    static func inflated(_ der: [UInt8]) -> [UInt8] {
        var bytes = der
        var index = 0
        var replaced = 0
        while index + 5 <= bytes.count {
            if Array(bytes[index..<(index + 5)]) == [0x02, 0x03, 0x01, 0x00, 0x00] {
                bytes.replaceSubrange(index..<(index + 5), with: [0x02, 0x03, 0x7F, 0xFF, 0xFF])
                replaced += 1
            }
            index += 1
        }
        #expect(replaced >= 2, "MAC and PBE iteration counts found")
        return bytes
    }

    @Test(arguments: [false, true])
    func ordinaryBundlesOpen(legacy: Bool) throws {
        for iterations in [2048, 65536] {
            let identity = try ClientIdentity(pkcs12: try Self.bundle(iterations: iterations, legacy: legacy), password: "secret")
            #expect(!identity.certificateDER.isEmpty && !identity.privateKeyDER.isEmpty)
        }
    }

    @Test func aBundleAskingForMillionsOfIterationsIsRefusedUnopened() throws {
        let bundle = Self.inflated(try Self.bundle(iterations: 65536))
        do {
            _ = try ClientIdentity(pkcs12: bundle, password: "secret")
            Issue.record("expected a refusal")
        } catch {
            #expect(error.description.contains("8388607 key-derivation iterations"), "\(error)")
        }
    }

    @Test func aWrongPasswordStillFails() throws {
        #expect(throws: OpenSSLError.self) { try ClientIdentity(pkcs12: try Self.bundle(iterations: 2048), password: "wrong") }
    }

    /// A bundle whose certificate was issued by an intermediate CA (the openssl CLI's
    /// `-certfile`): the intermediate is kept and sent after the leaf, byte for byte the
    /// certificate openssl wrote.
    @Test func aBundlesIntermediateIsKeptAsTheChain() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("p12-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try Shell.run("""
            cd "$1" && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -subj /CN=issuing-ca -days 2 2>/dev/null && \
            openssl req -newkey rsa:2048 -nodes -keyout key.pem -out leaf.csr -subj /CN=client 2>/dev/null && \
            openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out leaf.pem 2>/dev/null && \
            openssl pkcs12 -export -inkey key.pem -in leaf.pem -certfile ca.pem -out bundle.p12 -passout pass:secret && \
            openssl x509 -in ca.pem -outform DER -out ca.der && openssl x509 -in leaf.pem -outform DER -out leaf.der
            """, [directory])
        let bundle = Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/bundle.p12")))
        let identity = try ClientIdentity(pkcs12: bundle, password: "secret")
        let intermediate = Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/ca.der")))
        #expect(identity.certificateDER == Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/leaf.der"))))
        #expect(identity.chainDER == [intermediate])
        #expect(String(decoding: identity.certificatePEM, as: UTF8.self).components(separatedBy: "BEGIN CERTIFICATE").count == 3)
    }
}
