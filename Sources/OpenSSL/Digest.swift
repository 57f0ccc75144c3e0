internal import COpenSSL

/// Hashes, MACs, randomness and constant-time comparison.
public enum Digest {
    /// SHA-256 of `bytes` (OpenSSL's SHA-256 without its provider layer: COpenSSL's shim).
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { input in
            copenssl_sha256(input.baseAddress, input.count, &output)
        }
        return output
    }

    public static func sha256(_ text: String) -> [UInt8] { sha256(Array(text.utf8)) }

    /// SHA-1 of `bytes`, for names that are defined as a SHA-1 (a certificate's `x5t`
    /// thumbprint) and nothing that relies on collision resistance.
    public static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 20)
        bytes.withUnsafeBufferPointer { input in
            _ = SHA1(input.baseAddress, input.count, &output)
        }
        return output
    }

    /// HMAC-SHA-256 of `message` under `key` (RFC 2104, over OpenSSL's SHA-256 block
    /// functions: the one-shot `HMAC()` looked the algorithms up on every call, which
    /// cost a check-in, with its ten HMACs, 3% of its RSA operation).
    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { messageBuffer in
                copenssl_hmac_sha256(keyBuffer.baseAddress, keyBuffer.count, messageBuffer.baseAddress, messageBuffer.count, &output)
            }
        }
        return output
    }

    /// `count` bytes from OpenSSL's CSPRNG.
    public static func randomBytes(_ count: Int) throws(OpenSSLError) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: count)
        guard count == 0 || RAND_bytes(&output, Int32(count)) == 1 else { throw .drain("RAND_bytes") }
        return output
    }

    /// Compares two secrets in time that depends only on their lengths.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { left in
            b.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0 }
        }
    }
}
