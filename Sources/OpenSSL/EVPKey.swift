internal import COpenSSL

/// One private key (`EVP_PKEY`) of any algorithm OpenSSL reads; owns it and frees it in
/// `deinit`. The public key types (RSAPrivateKey, RSASigningKey, ECSigningKey,
/// ClientIdentity) are built on it: it is the one place that reads, generates, checks
/// and writes keys.
final class EVPKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation, and OpenSSL allows
    // concurrent use of a key through separate contexts; every operation here makes its own.
    let pointer: OpaquePointer

    init(takingOwnershipOf pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        EVP_PKEY_free(pointer)
    }

    // MARK: Reading

    /// A DER private key of any type: PKCS#8, or the traditional form of its algorithm
    /// (PKCS#1 for RSA, SEC 1 for EC).
    convenience init(der: [UInt8], operation: String) throws(OpenSSLError) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_AutoPrivateKey(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw .drain(operation) }
        self.init(takingOwnershipOf: parsed)
    }

    /// The first unencrypted private key in PEM text: PKCS#8 (`BEGIN PRIVATE KEY`) or
    /// traditional (`BEGIN RSA PRIVATE KEY`, `BEGIN EC PRIVATE KEY`). Blocks that hold
    /// no private key, such as a certificate, and text around the blocks are skipped.
    /// An encrypted key fails: the passphrase callback refuses at once, where OpenSSL's
    /// default would ask for one on the controlling terminal and wait.
    convenience init(pem: [UInt8], operation: String) throws(OpenSSLError) {
        guard let parsed = MemoryBIO.reading(pem, { PEM_read_bio_PrivateKey($0, nil, { _, _, _, _ in -1 }, nil) }) else {
            throw .drain(operation)
        }
        self.init(takingOwnershipOf: parsed)
    }

    /// A DER SubjectPublicKeyInfo of any type. The whole input must be the one
    /// structure: bytes after it would be a second thing the caller did not mean to send.
    convenience init(publicKeyDER der: [UInt8], operation: String) throws(OpenSSLError) {
        var consumed = 0
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let key = d2i_PUBKEY(nil, &cursor, buffer.count)
            if let start = buffer.baseAddress, let cursor { consumed = cursor - start }
            return key
        }
        guard let parsed else { throw .drain(operation) }
        self.init(takingOwnershipOf: parsed)
        guard consumed == der.count else { throw OpenSSLError(operation: operation, reasons: ["bytes after the key"]) }
    }

    // MARK: Generating

    static func generateRSA(bits: Int32) throws(OpenSSLError) -> EVPKey {
        try generate(EVP_PKEY_RSA, name: "RSA") { EVP_PKEY_CTX_set_rsa_keygen_bits($0, bits) == 1 }
    }

    static func generateP256() throws(OpenSSLError) -> EVPKey {
        try generate(EVP_PKEY_EC, name: "EC") { EVP_PKEY_CTX_set_ec_paramgen_curve_nid($0, NID_X9_62_prime256v1) == 1 }
    }

    private static func generate(_ type: Int32, name: String, configure: (OpaquePointer) -> Bool) throws(OpenSSLError) -> EVPKey {
        guard let context = EVP_PKEY_CTX_new_id(type, nil) else { throw .drain("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1, configure(context) else { throw .drain("\(name) keygen init") }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen(context, &key) == 1, let key else { throw .drain("\(name) keygen") }
        return EVPKey(takingOwnershipOf: key)
    }

    // MARK: Type

    /// The key types the wrapper's callers accept.
    enum Kind: Sendable, Equatable {
        case rsa
        /// ECDSA on P-256 (prime256v1) only: ES256 is defined on no other curve, and a
        /// key on another 256-bit curve (secp256k1, brainpool) would sign tokens APNs rejects.
        case p256

        var refusal: String {
            switch self {
            case .rsa: "not an RSA key"
            case .p256: "not a P-256 EC key"
            }
        }
    }

    /// Nil for any other algorithm or curve (RSA-PSS, P-384, Ed25519, …).
    var kind: Kind? {
        switch EVP_PKEY_get_base_id(pointer) {
        case EVP_PKEY_RSA:
            return .rsa
        case EVP_PKEY_EC:
            var curve = [CChar](repeating: 0, count: 64)
            var curveLength = 0
            guard EVP_PKEY_get_group_name(pointer, &curve, curve.count, &curveLength) == 1 else { return nil }
            return curve.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } == "prime256v1" ? .p256 : nil
        default:
            return nil
        }
    }

    /// Throws, naming `operation` and what was expected, unless this key is of `kind`.
    func require(_ kind: Kind, operation: String) throws(OpenSSLError) {
        guard self.kind == kind else { throw OpenSSLError(operation: operation, reasons: [kind.refusal]) }
    }

    /// Throws unless the private and public halves belong together. OpenSSL reads a key
    /// whose numbers were damaged without complaint; this refuses it before it signs
    /// garbage. For RSA, FIPS 140's pairwise consistency test: a signature the key makes
    /// must verify under its own public half (one private and one public operation).
    /// OpenSSL 3's EVP_PKEY_pairwise_check would run SP 800-56B's primality tests on p
    /// and q instead: about 80 ms for a 2048-bit key, paid by every process that loads
    /// one (each responder worker and CGI request with a Graph tenant configured).
    func requireConsistent(operation: String) throws(OpenSSLError) {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA else {
            try check(EVP_PKEY_pairwise_check, operation: operation, refusal: "the private and public parts of the key do not match")
            return
        }
        let probe = Array("ENS pairwise consistency test".utf8)
        guard let signature = try? signSHA256(probe), verifiesSHA256(probe, signature: signature) else {
            OpenSSLError.clearQueue()
            throw OpenSSLError(operation: operation, reasons: ["the private and public parts of the key do not match"])
        }
    }

    /// Throws unless the public key is sound for its type: for EC, a point on the curve,
    /// not the point at infinity, of the group's order. An ECDH peer that is not would
    /// leak bits of the private key it is combined with (invalid-curve attacks).
    func requireValidPublicKey(operation: String) throws(OpenSSLError) {
        try check(EVP_PKEY_public_check, operation: operation, refusal: "not a valid public key")
    }

    /// Throws unless the whole key pair is sound: the public check above, a private key
    /// in range (1 … n−1 for EC), and halves that agree.
    func requireValidKeyPair(operation: String) throws(OpenSSLError) {
        try check(EVP_PKEY_check, operation: operation, refusal: "not a valid key pair")
    }

    private func check(_ test: (OpaquePointer) -> Int32, operation: String, refusal: String) throws(OpenSSLError) {
        guard let context = EVP_PKEY_CTX_new(pointer, nil) else { throw .drain(operation) }
        defer { EVP_PKEY_CTX_free(context) }
        guard test(context) == 1 else {
            OpenSSLError.clearQueue()
            throw OpenSSLError(operation: operation, reasons: [refusal])
        }
    }

    /// The key size in bits (the modulus for RSA).
    var bits: Int { Int(EVP_PKEY_get_bits(pointer)) }

    /// The largest signature or ciphertext in bytes (k, the modulus length, for RSA).
    var maximumOutputSize: Int { Int(EVP_PKEY_get_size(pointer)) }

    // MARK: Writing

    /// The private key as PKCS#8 DER. Callers seal this before it goes anywhere.
    var pkcs8DER: [UInt8] {
        get throws(OpenSSLError) {
            guard let info = EVP_PKEY2PKCS8(pointer) else { throw .drain("EVP_PKEY2PKCS8") }
            defer { PKCS8_PRIV_KEY_INFO_free(info) }
            return try DER.encode("i2d_PKCS8_PRIV_KEY_INFO") { i2d_PKCS8_PRIV_KEY_INFO(info, $0) }
        }
    }

    /// The private key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    var pkcs8PEM: String {
        get throws(OpenSSLError) { PEM.encodeString(try pkcs8DER, label: "PRIVATE KEY") }
    }

    /// The public half as DER SubjectPublicKeyInfo.
    var publicKeyDER: [UInt8] {
        get throws(OpenSSLError) { try DER.encode("i2d_PUBKEY") { i2d_PUBKEY(pointer, $0) } }
    }

    /// An EC key's public point as OpenSSL encodes it by default: uncompressed, 0x04 ‖ X ‖
    /// Y (65 bytes on P-256). Read as a parameter, not through i2d: OpenSSL 3's encoder
    /// machinery costs more than the ECDH the point is used for.
    var encodedPublicPoint: [UInt8] {
        get throws(OpenSSLError) {
            var point = [UInt8](repeating: 0, count: 133)  // the largest uncompressed point, P-521's
            var length = 0
            guard EVP_PKEY_get_octet_string_param(pointer, OSSL_PKEY_PARAM_PUB_KEY, &point, point.count, &length) == 1 else {
                throw .drain("EVP_PKEY_get_octet_string_param")
            }
            return Array(point.prefix(length))
        }
    }

    /// The public half as PEM SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`).
    var publicKeyPEM: String {
        get throws(OpenSSLError) { PEM.encodeString(try publicKeyDER, label: "PUBLIC KEY") }
    }

    // MARK: Key agreement

    /// The private scalar of an EC key, big-endian, left-padded to `length` bytes.
    func privateScalar(length: Int) throws(OpenSSLError) -> [UInt8] {
        var number: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pointer, OSSL_PKEY_PARAM_PRIV_KEY, &number) == 1, let number else {
            throw .drain("EVP_PKEY_get_bn_param")
        }
        defer { BN_clear_free(number) }
        var bytes = [UInt8](repeating: 0, count: length)
        guard BN_bn2binpad(number, &bytes, Int32(length)) == Int32(length) else { throw .drain("BN_bn2binpad") }
        return bytes
    }

    /// The raw ECDH (or other key-agreement) output of this private key with `peer`'s
    /// public key, with no KDF applied: for EC, the x-coordinate of the shared point
    /// (SEC 1 §3.3.1), 32 bytes on P-256. OpenSSL checks the peer key first
    /// (`EVP_PKEY_derive_set_peer` validates it).
    func deriveSharedSecret(with peer: EVPKey) throws(OpenSSLError) -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new(pointer, nil) else { throw .drain("EVP_PKEY_CTX_new") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_derive_init(context) == 1 else { throw .drain("EVP_PKEY_derive_init") }
        guard EVP_PKEY_derive_set_peer(context, peer.pointer) == 1 else { throw .drain("EVP_PKEY_derive_set_peer") }
        var length = 0
        guard EVP_PKEY_derive(context, nil, &length) == 1 else { throw .drain("EVP_PKEY_derive") }
        var secret = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_derive(context, &secret, &length) == 1 else { throw .drain("EVP_PKEY_derive") }
        secret.removeSubrange(length...)
        return secret
    }

    // MARK: Signing

    /// Signs SHA-256(message) as OpenSSL does for the key's type: a DER ECDSA-Sig-Value
    /// for EC; RSASSA-PKCS1-v1_5 for RSA (asked for explicitly, not left to a default).
    /// Whether `signature` is this key's signature of `message` (SHA-256; PKCS#1 v1.5
    /// for RSA), checked with its public half.
    func verifiesSHA256(_ message: [UInt8], signature: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?  // owned by `context`
        guard EVP_DigestVerifyInit(context, &keyContext, EVP_sha256(), nil, pointer) == 1 else { return false }
        if EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA {
            guard EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PADDING) == 1 else { return false }
        }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    func signSHA256(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .drain("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?  // owned by `context`
        guard EVP_DigestSignInit(context, &keyContext, EVP_sha256(), nil, pointer) == 1 else { throw .drain("EVP_DigestSignInit") }
        if EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA {
            guard EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PADDING) == 1 else { throw .drain("EVP_PKEY_CTX_set_rsa_padding") }
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { throw .drain("EVP_DigestSign") }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else { throw .drain("EVP_DigestSign") }
        signature.removeSubrange(length...)
        return signature
    }
}
