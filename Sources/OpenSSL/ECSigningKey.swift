internal import COpenSSL

/// An ECDSA P-256 private key (an APNs `.p8` signing key); owns its `EVP_PKEY`.
public final class ECSigningKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation; each signature uses a
    // context of its own.
    private let key: OpaquePointer

    private init(takingOwnershipOf key: OpaquePointer) {
        self.key = key
    }

    deinit {
        EVP_PKEY_free(key)
    }

    /// Reads a PEM private key (PKCS#8 `-----BEGIN PRIVATE KEY-----`, as Apple's .p8
    /// files are). Refuses anything but a P-256 EC key.
    public convenience init(pem: String) throws(OpenSSLError) {
        let bytes = Array(pem.utf8)
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let parsed else { throw .drain("read EC private key") }
        var curve = [CChar](repeating: 0, count: 64)
        var curveLength = 0
        let namedCurve = EVP_PKEY_get_group_name(parsed, &curve, curve.count, &curveLength) == 1
            ? curve.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } : ""
        // ES256 is P-256 only; another 256-bit curve (secp256k1, brainpool) would sign
        // tokens APNs rejects.
        guard EVP_PKEY_get_base_id(parsed) == EVP_PKEY_EC, namedCurve == "prime256v1" else {
            EVP_PKEY_free(parsed)
            throw OpenSSLError(operation: "read EC private key", reasons: ["not a P-256 EC key"])
        }
        self.init(takingOwnershipOf: parsed)
    }

    /// Generates a fresh P-256 key (for tests and the APNs simulator's fixtures).
    public static func generate() throws(OpenSSLError) -> ECSigningKey {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw .drain("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1 else { throw .drain("EC keygen init") }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen(context, &key) == 1, let key else { throw .drain("EC keygen") }
        return ECSigningKey(takingOwnershipOf: key)
    }

    /// The private key as PKCS#8 PEM (what a .p8 file holds).
    public var pem: String {
        get throws(OpenSSLError) {
            guard let bio = BIO_new(BIO_s_mem()) else { throw .drain("BIO_new") }
            defer { BIO_free(bio) }
            guard PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else { throw .drain("PEM_write_bio_PrivateKey") }
            return Self.drainBIO(bio)
        }
    }

    /// The public key as PEM SubjectPublicKeyInfo (what a verifier needs).
    public var publicKeyPEM: String {
        get throws(OpenSSLError) {
            guard let bio = BIO_new(BIO_s_mem()) else { throw .drain("BIO_new") }
            defer { BIO_free(bio) }
            guard PEM_write_bio_PUBKEY(bio, key) == 1 else { throw .drain("PEM_write_bio_PUBKEY") }
            return Self.drainBIO(bio)
        }
    }

    /// ES256 (RFC 7518 §3.4): ECDSA P-256 over SHA-256, returned as the 64-byte raw
    /// r ‖ s that JWS requires — not the DER that OpenSSL produces, which APNs must not
    /// be sent.
    public func signES256(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .drain("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else { throw .drain("EVP_DigestSignInit") }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { throw .drain("EVP_DigestSign") }
        var der = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &der, &length, message, message.count) == 1 else { throw .drain("EVP_DigestSign") }
        // DER ECDSA-Sig-Value → fixed-width r ‖ s, leading zeros kept.
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, length)
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

    private static func drainBIO(_ bio: OpaquePointer) -> String {
        let pending = Int(BIO_ctrl_pending(bio))
        var bytes = [UInt8](repeating: 0, count: pending)
        _ = BIO_read(bio, &bytes, Int32(pending))
        return String(decoding: bytes, as: UTF8.self)
    }
}
