internal import COpenSSL

/// HKDF (RFC 5869): extract-then-expand key derivation, for turning a key-agreement
/// output, which is not uniformly random, into symmetric keys.
public enum HKDF {
    /// The most bytes HKDF-SHA256 can expand to (255 × the hash length).
    public static let maximumSHA256Length = 255 * 32

    /// HKDF-SHA256 of `ikm` with `salt` and `info`, `length` bytes. An empty salt is
    /// RFC 5869's default (a hash-length string of zeros). `info` is at most 1024 bytes,
    /// OpenSSL's limit.
    public static func sha256(ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws(OpenSSLError) -> [UInt8] {
        // OpenSSL refuses a missing key; RFC 5869 allows an empty one, but nothing here
        // derives from nothing.
        guard !ikm.isEmpty else { throw OpenSSLError(operation: "HKDF", reasons: ["empty input keying material"]) }
        guard (1...maximumSHA256Length).contains(length) else {
            throw OpenSSLError(operation: "HKDF", reasons: ["output length must be 1 to \(maximumSHA256Length) bytes"])
        }
        guard ikm.count <= Int(Int32.max), salt.count <= Int(Int32.max), info.count <= 1024 else {
            throw OpenSSLError(operation: "HKDF", reasons: ["input keying material, salt or info too long"])
        }
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { throw .drain("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_derive_init(context) == 1,
              EVP_PKEY_CTX_set_hkdf_md(context, EVP_sha256()) == 1,
              EVP_PKEY_CTX_set1_hkdf_key(context, ikm, Int32(ikm.count)) == 1 else { throw .drain("HKDF init") }
        // Empty salt and info are left unset, which RFC 5869 defines to mean the same
        // (its test case 3, in the tests, has both empty).
        if !salt.isEmpty {
            guard EVP_PKEY_CTX_set1_hkdf_salt(context, salt, Int32(salt.count)) == 1 else { throw .drain("HKDF salt") }
        }
        if !info.isEmpty {
            guard EVP_PKEY_CTX_add1_hkdf_info(context, info, Int32(info.count)) == 1 else { throw .drain("HKDF info") }
        }
        var output = [UInt8](repeating: 0, count: length)
        var written = length
        guard EVP_PKEY_derive(context, &output, &written) == 1, written == length else { throw .drain("HKDF") }
        return output
    }
}
