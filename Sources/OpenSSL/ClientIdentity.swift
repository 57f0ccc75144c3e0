internal import COpenSSL

/// A TLS client identity (certificate and private key) read from a PKCS#12 bundle in
/// memory. Nothing here touches the disk: the bundle arrives inside sealed credentials,
/// and the parts leave only as DER (to be sealed again) or PEM (for libcurl's blobs).
public struct ClientIdentity: Sendable, Equatable {
    /// The leaf certificate, DER.
    public let certificateDER: [UInt8]
    /// The private key, PKCS#8 DER.
    public let privateKeyDER: [UInt8]

    public init(certificateDER: [UInt8], privateKeyDER: [UInt8]) {
        self.certificateDER = certificateDER
        self.privateKeyDER = privateKeyDER
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
        var key: OpaquePointer?
        var certificate: OpaquePointer?
        guard PKCS12_parse(bundle, password, &key, &certificate, nil) == 1 else { throw .drain("open PKCS#12") }
        defer {
            EVP_PKEY_free(key)
            X509_free(certificate)
        }
        guard let key, let certificate else {
            throw OpenSSLError(operation: "open PKCS#12", reasons: ["no certificate and key in the bundle"])
        }
        guard X509_check_private_key(certificate, key) == 1 else { throw .drain("PKCS#12 key does not match its certificate") }
        certificateDER = try Self.encode("i2d_X509") { i2d_X509(certificate, $0) }
        guard let info = EVP_PKEY2PKCS8(key) else { throw .drain("EVP_PKEY2PKCS8") }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        privateKeyDER = try Self.encode("i2d_PKCS8_PRIV_KEY_INFO") { i2d_PKCS8_PRIV_KEY_INFO(info, $0) }
    }

    /// Reads a PEM file holding a certificate and its unencrypted private key (in
    /// either order), as APNs certificate exports are often kept.
    public init(pem bytes: [UInt8]) throws(OpenSSLError) {
        func withBIO<T>(_ body: (OpaquePointer) -> T?) -> T? {
            bytes.withUnsafeBytes { buffer in
                guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
                defer { BIO_free(bio) }
                return body(bio)
            }
        }
        guard let certificate = withBIO({ PEM_read_bio_X509($0, nil, nil, nil) }) else { throw .drain("read PEM certificate") }
        defer { X509_free(certificate) }
        guard let key = withBIO({ PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else { throw .drain("read PEM private key") }
        defer { EVP_PKEY_free(key) }
        guard X509_check_private_key(certificate, key) == 1 else { throw .drain("PEM key does not match its certificate") }
        certificateDER = try Self.encode("i2d_X509") { i2d_X509(certificate, $0) }
        guard let info = EVP_PKEY2PKCS8(key) else { throw .drain("EVP_PKEY2PKCS8") }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        privateKeyDER = try Self.encode("i2d_PKCS8_PRIV_KEY_INFO") { i2d_PKCS8_PRIV_KEY_INFO(info, $0) }
    }

    /// The certificate as PEM text (libcurl's CURLOPT_SSLCERT_BLOB).
    public var certificatePEM: [UInt8] { PEM.encode(certificateDER, label: "CERTIFICATE") }

    /// The key as PEM text (libcurl's CURLOPT_SSLKEY_BLOB).
    public var privateKeyPEM: [UInt8] { PEM.encode(privateKeyDER, label: "PRIVATE KEY") }

    /// Runs an i2d function twice (length, then bytes), as OpenSSL's DER encoders want.
    private static func encode(_ operation: String, _ i2d: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) throws(OpenSSLError) -> [UInt8] {
        let length = i2d(nil)
        guard length > 0 else { throw .drain(operation) }
        var output = [UInt8](repeating: 0, count: Int(length))
        let written = output.withUnsafeMutableBufferPointer { buffer in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d(&cursor)
        }
        guard written == length else { throw .drain(operation) }
        return output
    }
}

/// PEM armour (RFC 7468): base64 in 64-character lines between BEGIN/END labels.
enum PEM {
    static func encode(_ der: [UInt8], label: String) -> [UInt8] {
        // EVP_EncodeBlock writes 4 characters per 3 bytes plus a NUL.
        var base64 = [UInt8](repeating: 0, count: (der.count + 2) / 3 * 4 + 1)
        let written = Int(EVP_EncodeBlock(&base64, der, Int32(der.count)))
        base64.removeSubrange(written...)
        var output = Array("-----BEGIN \(label)-----\n".utf8)
        var line = 0
        while line < base64.count {
            output += base64[line..<min(line + 64, base64.count)]
            output.append(UInt8(ascii: "\n"))
            line += 64
        }
        output += Array("-----END \(label)-----\n".utf8)
        return output
    }
}
