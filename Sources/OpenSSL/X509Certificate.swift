internal import COpenSSL

/// What ENS needs to know of a DER X.509 certificate a client hands it (a device's
/// certificate for Graph's encrypted notifications): its public key's algorithm and
/// size, its validity window and its thumbprints. Nothing in it is secret; the
/// certificate itself stays DER bytes in the caller's hands.
public struct X509Certificate: Sendable, Equatable {
    public enum KeyAlgorithm: Sendable, Equatable {
        case rsa(bits: Int)
        case other(name: String)
    }

    /// The exact DER bytes read (one certificate, nothing after it).
    public let der: [UInt8]
    public let keyAlgorithm: KeyAlgorithm
    /// notBefore and notAfter, in seconds since the epoch.
    public let notBefore: Int64
    public let notAfter: Int64
    /// SHA-1 and SHA-256 of the DER certificate.
    public let thumbprint: CertificateThumbprint

    /// Fails unless `der` is exactly one DER X.509 certificate whose public key and
    /// validity dates OpenSSL can read.
    public init(der: [UInt8]) throws(OpenSSLError) {
        let operation = "read X.509 certificate"
        thumbprint = try CertificateThumbprint(certificateDER: der)
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let certificate = parsed else { throw .drain(operation) }
        defer { X509_free(certificate) }
        guard let key = X509_get0_pubkey(certificate) else { throw .drain(operation) }  // owned by the certificate
        if EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA {
            keyAlgorithm = .rsa(bits: Int(EVP_PKEY_get_bits(key)))
        } else {
            keyAlgorithm = .other(name: EVP_PKEY_get0_type_name(key).map { String(cString: $0) } ?? "unknown")
        }
        guard let start = Self.seconds(X509_get0_notBefore(certificate)), let end = Self.seconds(X509_get0_notAfter(certificate)) else {
            throw OpenSSLError(operation: operation, reasons: ["unreadable validity dates"])
        }
        self.der = der
        notBefore = start
        notAfter = end
    }

    /// An ASN1_TIME as seconds since the epoch (UTC), nil if OpenSSL cannot read it.
    private static func seconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
        guard let time else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        return Self.epochSeconds(year: Int64(parts.tm_year) + 1900, month: Int64(parts.tm_mon) + 1, day: Int64(parts.tm_mday))
            + Int64(parts.tm_hour) * 3600 + Int64(parts.tm_min) * 60 + Int64(parts.tm_sec)
    }

    /// Seconds from 1970-01-01 to midnight of a proleptic Gregorian date (days from
    /// civil, H. Hinnant's algorithm), so no time zone can shift the result.
    static func epochSeconds(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return (era * 146_097 + dayOfEra - 719_468) * 86_400
    }
}

/// An RSA public key that verifies RS256 signatures (RFC 7518 §3.3), built from a JSON
/// Web Key's modulus and exponent (RFC 7518 §6.3.1), for tokens signed by an identity
/// provider such as the Microsoft identity platform.
public final class RSAVerifyingKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation; each verification uses
    // a context of its own.
    private let key: EVPKey

    /// `modulus` and `exponent` as big-endian unsigned integers (a JWK's `n` and `e`
    /// after base64url). Refuses anything under `minimumBits` or over 8192 bits.
    public init(modulus: [UInt8], exponent: [UInt8], minimumBits: Int = 2048) throws(OpenSSLError) {
        let operation = "read RSA public key"
        let n = Array(modulus.drop(while: { $0 == 0 }))
        let e = Array(exponent.drop(while: { $0 == 0 }))
        guard !n.isEmpty, !e.isEmpty, n.count <= 1024, e.count <= 8 else {
            throw OpenSSLError(operation: operation, reasons: ["modulus or exponent out of range"])
        }
        // SubjectPublicKeyInfo { rsaEncryption, NULL } BIT STRING { RSAPublicKey { n, e } }
        let rsaPublicKey = DERBuilder.sequence(DERBuilder.unsignedInteger(n) + DERBuilder.unsignedInteger(e))
        let algorithm = DERBuilder.sequence([0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01, 0x05, 0x00])
        let spki = DERBuilder.sequence(algorithm + DERBuilder.element(0x03, [0x00] + rsaPublicKey))
        let key = try EVPKey(publicKeyDER: spki, operation: operation)
        try key.require(EVPKey.Kind.rsa, operation: operation)
        guard key.bits >= minimumBits, key.bits <= 8192 else {
            throw OpenSSLError(operation: operation, reasons: ["a \(key.bits)-bit key is outside \(minimumBits)...8192 bits"])
        }
        try key.requireValidPublicKey(operation: operation)
        self.key = key
    }

    public var bits: Int { key.bits }

    /// Whether `signature` is an RS256 signature of `message` under this key.
    public func verifiesRS256(_ message: [UInt8], signature: [UInt8]) -> Bool {
        key.verifiesSHA256(message, signature: signature)
    }
}

/// The few DER encodings RSAVerifyingKey builds.
private enum DERBuilder {
    static func length(_ count: Int) -> [UInt8] {
        if count < 0x80 { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var rest = count
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    static func element(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] { [tag] + length(content.count) + content }
    static func sequence(_ content: [UInt8]) -> [UInt8] { element(0x30, content) }
    /// A positive INTEGER: a leading zero when the top bit is set.
    static func unsignedInteger(_ magnitude: [UInt8]) -> [UInt8] {
        element(0x02, (magnitude.first ?? 0) >= 0x80 ? [0x00] + magnitude : magnitude)
    }
}
