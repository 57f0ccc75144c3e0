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

    /// Opens a PKCS#12 bundle with its password. Fails on a wrong password, a bundle
    /// without a certificate or key, one whose key derivation asks for more than
    /// `maximumKDFIterations` (or is not one whose cost can be read beforehand, such as
    /// scrypt), or anything that is not PKCS#12.
    public init(pkcs12 bytes: [UInt8], password: String) throws(OpenSSLError) {
        let bundle: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PKCS12(nil, &cursor, buffer.count)
        }
        guard let bundle else { throw .drain("read PKCS#12") }
        defer { PKCS12_free(bundle) }
        let iterations = copenssl_pkcs12_max_iterations(bundle, password, Self.maximumKDFIterations)
        guard iterations >= 0 else {
            throw OpenSSLError(operation: "open PKCS#12", reasons: ["the bundle does not open, or uses a key derivation whose cost cannot be bounded"])
        }
        guard iterations <= Self.maximumKDFIterations else {
            throw OpenSSLError(operation: "open PKCS#12", reasons: ["it asks for \(iterations) key-derivation iterations, more than \(Self.maximumKDFIterations)"])
        }
        var parsedKey: OpaquePointer?
        var parsedCertificate: OpaquePointer?
        var parsedChain: OpaquePointer?
        guard PKCS12_parse(bundle, password, &parsedKey, &parsedCertificate, &parsedChain) == 1 else { throw .drain("open PKCS#12") }
        let key = parsedKey.map(EVPKey.init(takingOwnershipOf:))
        defer {
            X509_free(parsedCertificate)
            copenssl_x509_stack_free(parsedChain)
        }
        guard let key, let certificate = parsedCertificate else {
            throw OpenSSLError(operation: "open PKCS#12", reasons: ["no certificate and key in the bundle"])
        }
        let count = Int(copenssl_x509_stack_count(parsedChain))
        guard count <= Self.maximumChainLength else {
            throw OpenSSLError(operation: "open PKCS#12", reasons: ["it carries \(count) CA certificates, more than \(Self.maximumChainLength)"])
        }
        var chain: [[UInt8]] = []
        if let parsedChain {
            for index in 0..<count {
                guard let member = copenssl_x509_stack_value(parsedChain, Int32(index)) else { continue }
                chain.append(try DER.encode("i2d_X509") { i2d_X509(member, $0) })
            }
        }
        try self.init(certificate: certificate, key: key, chain: chain, mismatch: "PKCS#12 key does not match its certificate")
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
