internal import COpenSSL
import Synchronization

/// An RSA private key for sealed parameters (raw decryption, implicit rejection); its
/// `EVP_PKEY` is owned by an `EVPKey`.
public final class RSAPrivateKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation, and OpenSSL allows
    // concurrent use of a key through separate EVP_PKEY_CTX objects.
    private let key: EVPKey
    /// Ready-made raw-decryption contexts (EVP_PKEY_CTX, owned here and freed in
    /// deinit). Setting one up costs OpenSSL 3 provider look-ups that are a sizeable
    /// fraction of the RSA operation itself, so contexts are reused; a context is used
    /// by one thread at a time, taken from and returned to this list under a lock.
    private let idleContexts = Mutex<[OpaquePointerBox]>([])

    /// A secret derived from this key alone, for implicit rejection: what a sealed
    /// block that does not decrypt is replaced by is derived from it and the block
    /// (SealedParameter), so it is the same every time and unknowable without the key.
    public let rejectionSecret: [UInt8]

    private init(_ key: EVPKey) {
        self.key = key
        // Over the traditional (PKCS#1) DER, as it has always been: a different encoding
        // would change every key's stand-ins.
        var der: UnsafeMutablePointer<UInt8>?
        let length = i2d_PrivateKey(key.pointer, &der)
        var material = Array("ENS implicit rejection v1".utf8)
        if length > 0, let der {
            material += UnsafeBufferPointer(start: der, count: Int(length))
            CRYPTO_clear_free(der, Int(length), "RSAPrivateKey", 0)
        }
        rejectionSecret = Digest.sha256(material)
        material.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
    }

    deinit {
        // The contexts go before the key they refer to (`key` is released after this).
        idleContexts.withLock { contexts in
            for context in contexts { EVP_PKEY_CTX_free(context.pointer) }
        }
    }

    /// Generates a fresh key (slow: ~0.1–0.7 s for 2048 bits; keep it off request paths).
    public static func generate(bits: Int32 = 2048) throws(OpenSSLError) -> RSAPrivateKey {
        RSAPrivateKey(try EVPKey.generateRSA(bits: bits))
    }

    /// Reads a DER-encoded private key (PKCS#1 or PKCS#8), as `derRepresentation` writes.
    public convenience init(derRepresentation der: [UInt8]) throws(OpenSSLError) {
        let key = try EVPKey(der: der, operation: "read private key")
        try key.require(.rsa, operation: "read private key")
        self.init(key)
    }

    /// The private key as PKCS#8 DER. Callers seal this before it goes anywhere.
    public var derRepresentation: [UInt8] {
        get throws(OpenSSLError) { try key.pkcs8DER }
    }

    /// The public half as PEM SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`).
    public var publicKeyPEM: String {
        get throws(OpenSSLError) { try key.publicKeyPEM }
    }

    /// Modulus size in bytes (k): the length of every ciphertext block.
    public var modulusByteCount: Int { key.maximumOutputSize }

    /// The raw RSA private-key operation (c^d mod n) on one k-byte block, with no padding
    /// check. PKCS#1 v1.5 unpadding is done by the caller in constant time: OpenSSL 3.0's
    /// own check reports failures through the error queue, which is a timing oracle.
    /// Returns nil only for input that is not a valid block (wrong length, c ≥ n); the
    /// caller treats that exactly like a bad padding.
    public func rawDecrypt(block: [UInt8]) -> [UInt8]? {
        let size = modulusByteCount
        guard block.count == size, let context = takeDecryptionContext() else { return nil }
        var output = [UInt8](repeating: 0, count: size)
        var outputLength = size
        let result = EVP_PKEY_decrypt(context.pointer, &output, &outputLength, block, block.count)
        guard result == 1, outputLength == size else {
            OpenSSLError.clearQueue()
            EVP_PKEY_CTX_free(context.pointer)  // not reused after a failure
            return nil
        }
        idleContexts.withLock { contexts in
            if contexts.count < 8 { contexts.append(context) } else { EVP_PKEY_CTX_free(context.pointer) }
        }
        return output
    }

    private func takeDecryptionContext() -> OpaquePointerBox? {
        if let reused = idleContexts.withLock({ $0.popLast() }) { return reused }
        guard let context = EVP_PKEY_CTX_new(key.pointer, nil) else { return nil }
        guard EVP_PKEY_decrypt_init(context) == 1, EVP_PKEY_CTX_set_rsa_padding(context, RSA_NO_PADDING) == 1 else {
            OpenSSLError.clearQueue()
            EVP_PKEY_CTX_free(context)
            return nil
        }
        return OpaquePointerBox(pointer: context)
    }
}

/// An OpenSSL object pointer that may cross threads (its owner serialises its use).
struct OpaquePointerBox: @unchecked Sendable {
    let pointer: OpaquePointer
}
