internal import COpenSSL

/// A TLS client identity (certificate and private key) read from a PKCS#12 bundle in
/// memory. Nothing here touches the disk: the bundle arrives inside sealed credentials,
/// and the parts leave only as DER (to be sealed again) or PEM (for libcurl's blobs).
public struct ClientIdentity: Sendable, Equatable {
    /// The leaf certificate, DER.
    public let certificateDER: [UInt8]
    /// The private key, PKCS#8 DER.
    public let privateKeyDER: [UInt8]
    /// The intermediate certificates the bundle carries, DER, sent after the leaf so a
    /// server that only trusts the root can build the chain.
    public let chainDER: [[UInt8]]

    /// The most intermediate certificates kept from a bundle (real chains have one or two).
    public static let maximumChainLength = 8

    public init(certificateDER: [UInt8], privateKeyDER: [UInt8], chainDER: [[UInt8]] = []) {
        self.certificateDER = certificateDER
        self.privateKeyDER = privateKeyDER
        self.chainDER = chainDER
    }

    /// The most key-derivation iterations a client's bundle may ask for, per KDF.
    /// Windows, macOS and OpenSSL export with 2,000–10,000 (OpenSSL 3: 2,048, PBKDF2);
    /// 100,000 PBKDF2-SHA256 rounds take about 30 ms here, so a bundle stays well under
    /// a second, while one asking for 10^9 (minutes of CPU, in a bundle under 1 KB) is
    /// refused before any derivation runs.
    public static let maximumKDFIterations = 100_000

    /// The most key-derivation iterations a bundle may ask for in all, summed over the
    /// MAC, every encrypted safe and every shrouded key: the per-KDF cap times four. An
    /// exported bundle runs three derivations (the MAC, the certificates' encrypted
    /// safe, the shrouded key) and an empty password may try the MAC twice, so every
    /// ordinary bundle fits, while one with a hundred encrypted safes each just under
    /// the cap (seconds of CPU) is refused before the first derivation. About 120 ms of
    /// PBKDF2-SHA256 at most (legacy PKCS#12 PBE derives key and IV apart, so up to
    /// three times that).
    public static let maximumTotalKDFIterations = 4 * maximumKDFIterations

    /// Why a PKCS#12 bundle was not opened. Descriptions name counts, never the password
    /// or key material.
    public enum PKCS12Error: Error, Sendable, Equatable, CustomStringConvertible {
        /// One key derivation asks for more iterations than `maximumKDFIterations`.
        case derivationTooCostly(iterations: Int, limit: Int)
        /// The derivations together ask for more than `maximumTotalKDFIterations`.
        case bundleTooCostly(iterations: Int, budget: Int)
        /// A key derivation whose cost cannot be read beforehand (scrypt, an unknown
        /// scheme), or a shape this does not open (nested safes, no MAC beside a password).
        case unboundedOrUnknown
        /// The password does not open the bundle (its MAC does not verify).
        case wrongPassword
        /// Not PKCS#12, no certificate and key in it, a chain too long, or OpenSSL failed.
        case openSSL(OpenSSLError)

        public var description: String {
            switch self {
            case .derivationTooCostly(let iterations, let limit):
                "PKCS#12 bundle refused: it asks for \(iterations) key-derivation iterations, more than \(limit)"
            case .bundleTooCostly(let iterations, let budget):
                "PKCS#12 bundle refused: its key derivations ask for \(iterations) iterations in all, more than \(budget)"
            case .unboundedOrUnknown:
                "PKCS#12 bundle refused: it does not open, or uses a key derivation whose cost cannot be bounded"
            case .wrongPassword:
                "PKCS#12 bundle refused: the password does not open it"
            case .openSSL(let error):
                error.description
            }
        }

        /// What failed, for a log line: the description for a refusal, OpenSSL's
        /// operation otherwise.
        public var operation: String {
            if case .openSSL(let error) = self { return error.operation }
            return description
        }
    }

    /// Opens a PKCS#12 bundle with its password. Fails on a wrong password, a bundle
    /// without a certificate or key, one whose key derivations ask for more than
    /// `maximumKDFIterations` each or `maximumTotalKDFIterations` together (or are not
    /// ones whose cost can be read beforehand, such as scrypt), or anything that is not
    /// PKCS#12.
    public init(pkcs12 bytes: [UInt8], password: String) throws(PKCS12Error) {
        var derivations = 0
        try self.init(pkcs12: bytes, password: password, derivations: &derivations)
    }

    /// As `init(pkcs12:password:)`, telling in `derivations` how many key derivations
    /// ran (tests check that a refused bundle cost none).
    init(pkcs12 bytes: [UInt8], password: String, derivations: inout Int) throws(PKCS12Error) {
        let bundle: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PKCS12(nil, &cursor, buffer.count)
        }
        guard let bundle else { throw .openSSL(.drain("read PKCS#12")) }
        defer { PKCS12_free(bundle) }
        var cost = copenssl_pkcs12_cost()
        var parsedKey: OpaquePointer?
        var parsedCertificate: OpaquePointer?
        var parsedChain: OpaquePointer?
        // The bundle is opened once, here: the budget is checked against every
        // derivation it can ask for before the first runs (copenssl_pkcs12_open).
        let status = copenssl_pkcs12_open(bundle, password, Self.maximumKDFIterations, Self.maximumTotalKDFIterations,
                                          &cost, &parsedKey, &parsedCertificate, &parsedChain)
        derivations = cost.derivations
        let key = parsedKey.map(EVPKey.init(takingOwnershipOf:))
        defer {
            X509_free(parsedCertificate)
            copenssl_x509_stack_free(parsedChain)
        }
        switch status {
        case COPENSSL_PKCS12_OK: break
        case COPENSSL_PKCS12_OVER_CAP:
            OpenSSLError.clearQueue()
            throw .derivationTooCostly(iterations: cost.asked, limit: Self.maximumKDFIterations)
        case COPENSSL_PKCS12_OVER_BUDGET:
            OpenSSLError.clearQueue()
            throw .bundleTooCostly(iterations: cost.asked, budget: Self.maximumTotalKDFIterations)
        case COPENSSL_PKCS12_WRONG_PASSWORD:
            OpenSSLError.clearQueue()
            throw .wrongPassword
        case COPENSSL_PKCS12_UNBOUNDED, COPENSSL_PKCS12_MALFORMED:
            OpenSSLError.clearQueue()
            throw .unboundedOrUnknown
        default:
            throw .openSSL(.drain("open PKCS#12"))
        }
        guard let key, let certificate = parsedCertificate else {
            throw .openSSL(OpenSSLError(operation: "open PKCS#12", reasons: ["no certificate and key in the bundle"]))
        }
        let count = Int(copenssl_x509_stack_count(parsedChain))
        guard count <= Self.maximumChainLength else {
            throw .openSSL(OpenSSLError(operation: "open PKCS#12",
                                        reasons: ["it carries \(count) CA certificates, more than \(Self.maximumChainLength)"]))
        }
        do {
            var chain: [[UInt8]] = []
            if let parsedChain {
                for index in 0..<count {
                    guard let member = copenssl_x509_stack_value(parsedChain, Int32(index)) else { continue }
                    chain.append(try DER.encode("i2d_X509") { i2d_X509(member, $0) })
                }
            }
            try self.init(certificate: certificate, key: key, chain: chain, mismatch: "PKCS#12 key does not match its certificate")
        } catch {
            throw .openSSL(error)
        }
    }

    /// Reads a PEM file holding a certificate and its unencrypted private key (in
    /// either order), as APNs certificate exports are often kept.
    public init(pem bytes: [UInt8]) throws(OpenSSLError) {
        guard let certificate = MemoryBIO.reading(bytes, { PEM_read_bio_X509($0, nil, nil, nil) }) else { throw .drain("read PEM certificate") }
        defer { X509_free(certificate) }
        let key = try EVPKey(pem: bytes, operation: "read PEM private key")
        try self.init(certificate: certificate, key: key, chain: [], mismatch: "PEM key does not match its certificate")
    }

    /// The identity of a certificate (borrowed) and its key, refused (as `mismatch`)
    /// unless they belong together.
    private init(certificate: OpaquePointer, key: EVPKey, chain: [[UInt8]], mismatch: String) throws(OpenSSLError) {
        guard X509_check_private_key(certificate, key.pointer) == 1 else { throw .drain(mismatch) }
        certificateDER = try DER.encode("i2d_X509") { i2d_X509(certificate, $0) }
        privateKeyDER = try key.pkcs8DER
        chainDER = chain
    }

    /// The certificate, then its intermediates, as PEM text (libcurl's
    /// CURLOPT_SSLCERT_BLOB, which sends the certificates after the first as its chain).
    public var certificatePEM: [UInt8] {
        ([certificateDER] + chainDER).flatMap { PEM.encode($0, label: "CERTIFICATE") }
    }

    /// The key as PEM text (libcurl's CURLOPT_SSLKEY_BLOB).
    public var privateKeyPEM: [UInt8] { PEM.encode(privateKeyDER, label: "PRIVATE KEY") }
}
