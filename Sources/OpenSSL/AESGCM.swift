internal import COpenSSL

/// AES-256-GCM fetched from the default provider once. Handing OpenSSL 3 the legacy
/// `EVP_aes_256_gcm()` makes every init look the implementation up in the provider
/// again, which cost more than sealing a short value. A fetched cipher is immutable and
/// safe to share between threads; it lives as long as the process.
private let aes256GCM: OpaquePointerBox = {
    guard let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) else {
        preconditionFailure("OpenSSL's default provider has no AES-256-GCM")
    }
    return OpaquePointerBox(pointer: cipher)
}()

/// AES-256-GCM sealing for secrets at rest (private keys, sync keys), for the
/// credentials inside callback URLs, and, under a key from ECDH, for encrypted previews.
///
/// Sealed layout: 12-byte random nonce ‖ ciphertext ‖ 16-byte tag. `associatedData`
/// binds a sealed value to its context (e.g. the row it belongs to), so a value copied
/// into another row does not open.
public struct AESGCMKey: Sendable {
    public static let keySize = 32
    public static let nonceSize = 12
    public static let tagSize = 16

    private let key: [UInt8]

    public init(bytes: [UInt8]) throws(OpenSSLError) {
        guard bytes.count == Self.keySize else {
            throw OpenSSLError(operation: "AES-256-GCM key", reasons: ["key must be 32 bytes, got \(bytes.count)"])
        }
        key = bytes
    }

    public static func random() throws(OpenSSLError) -> AESGCMKey {
        try AESGCMKey(bytes: Digest.randomBytes(keySize))
    }

    /// Derives a sub-key for one purpose (HMAC-SHA-256 of the label under this key), so
    /// one master key can protect several kinds of data without reusing a key.
    public func derived(label: String) -> AESGCMKey {
        // HMAC-SHA-256 output is always 32 bytes. Falling back to `self` would hand out
        // the master key as its own sub-key, so an impossible failure stops the process.
        let bytes = derivedBytes(label: label)
        precondition(bytes.count == Self.keySize, "HMAC-SHA-256 gave \(bytes.count) bytes for an AES-256 sub-key")
        return AESGCMKey(unchecked: bytes)
    }

    /// A key whose length the caller has checked.
    private init(unchecked bytes: [UInt8]) {
        key = bytes
    }

    /// 32 bytes derived for one purpose (HMAC-SHA-256 of the label), e.g. an HMAC key.
    public func derivedBytes(label: String) -> [UInt8] {
        Digest.hmacSHA256(key: key, message: Array(label.utf8))
    }

    public func seal(_ plaintext: [UInt8], associatedData: [UInt8] = []) throws(OpenSSLError) -> [UInt8] {
        try seal(plaintext, associatedData: associatedData, nonce: Digest.randomBytes(Self.nonceSize))
    }

    /// Seals with the caller's nonce, in the same layout. Package-only: a nonce repeated
    /// under one key gives away the authentication key and the XOR of the plaintexts, so
    /// callers outside this package get random nonces. Inside it, for a key used once
    /// (a fresh ECDH-derived key) and for fixed test vectors.
    package func seal(_ plaintext: [UInt8], associatedData: [UInt8], nonce: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        guard nonce.count == Self.nonceSize else {
            throw OpenSSLError(operation: "seal", reasons: ["nonce must be \(Self.nonceSize) bytes, got \(nonce.count)"])
        }
        guard let context = EVP_CIPHER_CTX_new() else { throw .drain("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        var output = nonce
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        var total = 0
        guard EVP_EncryptInit_ex(context, aes256GCM.pointer, nil, key, nonce) == 1 else { throw .drain("seal init") }
        if !associatedData.isEmpty {
            guard EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else { throw .drain("seal aad") }
        }
        if !plaintext.isEmpty {
            guard EVP_EncryptUpdate(context, &ciphertext, &length, plaintext, Int32(plaintext.count)) == 1 else { throw .drain("seal") }
            total = Int(length)
        }
        let finished = ciphertext.withUnsafeMutableBufferPointer { buffer in
            EVP_EncryptFinal_ex(context, buffer.baseAddress! + total, &length)
        }
        guard finished == 1 else { throw .drain("seal final") }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: Self.tagSize)
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(Self.tagSize), &tag) == 1 else { throw .drain("seal tag") }
        output.append(contentsOf: ciphertext[0..<total])
        output.append(contentsOf: tag)
        return output
    }

    /// Opens a sealed value; throws on any tampering, truncation or wrong key.
    public func open(_ sealed: [UInt8], associatedData: [UInt8] = []) throws(OpenSSLError) -> [UInt8] {
        guard sealed.count >= Self.nonceSize + Self.tagSize else {
            throw OpenSSLError(operation: "open", reasons: ["sealed value too short"])
        }
        let nonce = Array(sealed[0..<Self.nonceSize])
        let body = Array(sealed[Self.nonceSize..<(sealed.count - Self.tagSize)])
        var tag = Array(sealed[(sealed.count - Self.tagSize)...])
        guard let context = EVP_CIPHER_CTX_new() else { throw .drain("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        var plaintext = [UInt8](repeating: 0, count: body.count + 16)
        var length: Int32 = 0
        var total = 0
        guard EVP_DecryptInit_ex(context, aes256GCM.pointer, nil, key, nonce) == 1 else { throw .drain("open init") }
        if !associatedData.isEmpty {
            guard EVP_DecryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else { throw .drain("open aad") }
        }
        if !body.isEmpty {
            guard EVP_DecryptUpdate(context, &plaintext, &length, body, Int32(body.count)) == 1 else { throw .drain("open") }
            total = Int(length)
        }
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(Self.tagSize), &tag) == 1 else { throw .drain("open tag") }
        let finished = plaintext.withUnsafeMutableBufferPointer { buffer in
            EVP_DecryptFinal_ex(context, buffer.baseAddress! + total, &length)
        }
        guard finished == 1 else {
            OpenSSLError.clearQueue()
            throw OpenSSLError(operation: "open", reasons: ["authentication failed"])
        }
        total += Int(length)
        return Array(plaintext[0..<total])
    }
}
