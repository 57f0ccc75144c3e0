import ENSTestSupport
import Foundation
@testable import OpenSSL
import Testing

/// A client-supplied PKCS#12 chooses its own key-derivation iteration counts. Bundles
/// made by the openssl CLI (an independent implementation) open as before; one that asks
/// for millions of iterations is refused before any derivation runs, and so is one that
/// asks for many derivations each under the per-derivation cap (a bundle arriving with
/// the check-in's `creds` is opened on every request).
@Suite struct PKCS12BoundTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A bundle hand-assembled by Tests/tools/pkcs12_safes.py (Python `cryptography` and
    /// its own RFC 7292 MAC): the certificate's encrypted safe, a shrouded key, `extra`
    /// more encrypted safes and the MAC, every derivation asking for `iterations`.
    static func handMade(iterations: Int, extra: Int, password: String = "secret") throws -> [UInt8] {
        try withTemporaryDirectory { directory in
            let output = directory.appendingPathComponent("bundle.p12")
            _ = try Shell.run("python3 \"$1\" \"$2\" \"$3\" \"$4\" > \"$5\"", [
                root.appendingPathComponent("Tests/tools/pkcs12_safes.py").path, password, String(iterations), String(extra), output.path,
            ])
            return Array(try Data(contentsOf: output))
        }
    }

    /// Opens `bundle`; the identity or the refusal, and how many key derivations ran.
    static func open(_ bundle: [UInt8], password: String = "secret") -> (Result<ClientIdentity, ClientIdentity.PKCS12Error>, derivations: Int) {
        var derivations = 0
        do {
            return (.success(try ClientIdentity(pkcs12: bundle, password: password, derivations: &derivations)), derivations)
        } catch {
            return (.failure(error), derivations)
        }
    }
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
        let (result, derivations) = Self.open(bundle)
        #expect(result.failure == .derivationTooCostly(iterations: 8_388_607, limit: ClientIdentity.maximumKDFIterations))
        #expect(derivations == 0)
    }

    @Test func aWrongPasswordStillFails() throws {
        #expect(throws: ClientIdentity.PKCS12Error.wrongPassword) { try ClientIdentity(pkcs12: try Self.bundle(iterations: 2048), password: "wrong") }
    }

    /// The attack: a hundred encrypted safes of 50,000 iterations each, every one under
    /// the per-derivation cap, 5 million in all (seconds of CPU per request for a bundle
    /// of 16 KB). Refused by the total budget with no derivation run: the count stays
    /// 0, and a wrong password gets the same refusal, so the bundle was judged before
    /// its MAC (the first derivation) was ever computed.
    @Test func aBundleOfManyCheapSafesIsRefusedBeforeAnyDerivation() throws {
        let bundle = try Self.handMade(iterations: 50_000, extra: 100)
        for password in ["secret", "wrong"] {
            let (result, derivations) = Self.open(bundle, password: password)
            // MAC, certificates' safe, shrouded key, then the extra safes: the fifth
            // extra one takes the sum past 400,000.
            #expect(result.failure == .bundleTooCostly(iterations: 450_000, budget: ClientIdentity.maximumTotalKDFIterations), "\(password)")
            #expect(derivations == 0, "\(password)")
        }
    }

    /// The budget is on iterations, not on safes: the same shape with the sum exactly
    /// at the budget opens (8 derivations of 50,000), each derivation run once (the MAC,
    /// six encrypted safes, the key): every safe is decrypted once, not twice.
    @Test func aHandMadeBundleWithinTheBudgetOpensEachSafeOnce() throws {
        let (result, derivations) = Self.open(try Self.handMade(iterations: 50_000, extra: 5))
        let identity = try result.get()
        #expect(!identity.certificateDER.isEmpty && !identity.privateKeyDER.isEmpty && identity.chainDER.isEmpty)
        #expect(derivations == 8)
        let (over, none) = Self.open(try Self.handMade(iterations: 50_000, extra: 6))
        #expect(over.failure == .bundleTooCostly(iterations: 450_000, budget: ClientIdentity.maximumTotalKDFIterations))
        #expect(none == 0)
    }

    /// What the openssl CLI exports costs three derivations (MAC, certificates' safe,
    /// key); with an empty password the MAC is tried as "no password", then as "", and
    /// both tries are in the budget.
    @Test func anExportCostsThreeDerivationsAndAnEmptyPasswordFour() throws {
        let (result, derivations) = Self.open(try Self.bundle(iterations: 2048))
        #expect(result.failure == nil && derivations == 3)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("p12-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try Shell.run("""
            cd "$1" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out cert.pem \
              -subj /CN=client -days 2 2>/dev/null && \
            openssl pkcs12 -export -inkey key.pem -in cert.pem -out bundle.p12 -passout pass:
            """, [directory])
        let (empty, emptyDerivations) = Self.open(Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/bundle.p12"))), password: "")
        #expect(empty.failure == nil && emptyDerivations == 4, "\(empty)")
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

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
