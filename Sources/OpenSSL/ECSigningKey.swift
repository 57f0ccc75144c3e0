internal import COpenSSL

/// An ECDSA P-256 private key (an APNs `.p8` signing key); its `EVP_PKEY` is owned by an
/// `EVPKey`.
public final class ECSigningKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation; each signature uses a
    // context of its own.
    private let key: EVPKey

    private init(_ key: EVPKey) {
        self.key = key
    }

    /// Reads a PEM private key (PKCS#8 `-----BEGIN PRIVATE KEY-----`, as Apple's .p8
    /// files are). Refuses anything but a P-256 EC key.
    public convenience init(pem: String) throws(OpenSSLError) {
        let key = try EVPKey(pem: Array(pem.utf8), operation: "read EC private key")
        try key.require(.p256, operation: "read EC private key")
        self.init(key)
    }

    /// Generates a fresh P-256 key (for tests and the APNs simulator's fixtures).
    public static func generate() throws(OpenSSLError) -> ECSigningKey {
        ECSigningKey(try EVPKey.generateP256())
    }

    /// The private key as PKCS#8 PEM (what a .p8 file holds).
    public var pem: String {
        get throws(OpenSSLError) { try key.pkcs8PEM }
    }

    /// The public key as PEM SubjectPublicKeyInfo (what a verifier needs).
    public var publicKeyPEM: String {
        get throws(OpenSSLError) { try key.publicKeyPEM }
    }

    /// ES256 (RFC 7518 §3.4): ECDSA P-256 over SHA-256, returned as the 64-byte raw
    /// r ‖ s that JWS requires — not the DER that OpenSSL produces, which APNs must not
    /// be sent.
    public func signES256(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        let der = try key.signSHA256(message)
        // DER ECDSA-Sig-Value → fixed-width r ‖ s, leading zeros kept.
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw .drain("d2i_ECDSA_SIG") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var raw = [UInt8](repeating: 0, count: 64)
        let wrote = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(r, buffer.baseAddress, 32) == 32 && BN_bn2binpad(s, buffer.baseAddress! + 32, 32) == 32
        }
        guard wrote else { throw .drain("BN_bn2binpad") }
        return raw
    }
}
