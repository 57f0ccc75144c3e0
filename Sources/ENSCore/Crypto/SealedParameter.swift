public import OpenSSL

/// Opens a *sealed* request parameter: base64 of one or more RSA PKCS#1 v1.5
/// ciphertexts, each k bytes (k = modulus size), under the user record's key.
///
/// Every failure — bad base64, a length that is not a multiple of k, a block that does
/// not decrypt, bad padding — returns nil after the same work as a success: one RSA
/// private-key operation per k bytes of input, and (as in TLS's implicit rejection) a
/// random stand-in plaintext handed on to the caller's parser, which then fails like it
/// would on a real but unparsable plaintext. Padding is checked in constant time, in
/// Swift, because OpenSSL 3.0 reports PKCS#1 failures through its error queue.
public enum SealedParameter {
    /// Upper bound on ciphertext blocks: 64 × 245 bytes ≈ 15 KiB of plaintext, room for
    /// `creds` carrying a PKCS#12 client certificate; anything larger is refused.
    public static let maximumBlocks = 64

    /// The plaintext, or a random stand-in plus `valid == false`. Callers must treat
    /// both the same way up to the point of answering, and answer every failure with
    /// `APIError.sealedParameterRejected`.
    public static func open(_ text: String, with key: RSAPrivateKey) -> (plaintext: [UInt8], valid: Bool) {
        let k = key.modulusByteCount
        let decoded = Base64.decodeLenient(text)
        let ciphertext = decoded ?? []
        let wellFormed = decoded != nil && !ciphertext.isEmpty && ciphertext.count % k == 0 && ciphertext.count / k <= maximumBlocks
        let blockCount = wellFormed ? ciphertext.count / k : min(max(1, (ciphertext.count + k - 1) / k), maximumBlocks)

        // The stand-in is made before knowing whether it is needed, at a length that
        // depends only on the input's size, so valid and invalid padding cost the same.
        let standIn = (try? Digest.randomBytes(blockCount * (k - 11))) ?? [0]
        var valid: UInt8 = wellFormed ? 0xFF : 0
        var message: [UInt8] = []
        message.reserveCapacity(blockCount * (k - 11))
        for blockIndex in 0..<blockCount {
            let block = wellFormed ? Array(ciphertext[(blockIndex * k)..<((blockIndex + 1) * k)]) : dummyBlock(k)
            guard let encoded = key.rawDecrypt(block: block) else {
                valid = 0
                continue
            }
            let (blockValid, start) = unpadType2(encoded)
            valid &= blockValid
            // Copy the whole tail either way; the start offset only matters if valid.
            message.append(contentsOf: encoded[min(start, encoded.count)...])
        }
        if valid == 0xFF { return (message, true) }
        return (standIn, false)
    }

    /// Checks EM = 0x00 ‖ 0x02 ‖ PS (≥ 8 non-zero bytes) ‖ 0x00 ‖ M in constant time.
    /// Returns 0xFF and the offset of M when valid, 0 and an arbitrary offset when not.
    static func unpadType2(_ encoded: [UInt8]) -> (valid: UInt8, messageStart: Int) {
        let count = encoded.count
        guard count >= 11 else { return (0, count) }
        var valid = isZero(encoded[0]) & isZero(encoded[1] ^ 0x02)
        var lookingForZero: UInt8 = 0xFF
        var zeroIndex = 0
        for index in 2..<count {
            let isZeroByte = isZero(encoded[index])
            let found = lookingForZero & isZeroByte
            // zeroIndex = found ? index : zeroIndex, without a branch.
            zeroIndex = select(found, index, zeroIndex)
            lookingForZero &= ~isZeroByte
        }
        valid &= ~lookingForZero                       // a separator exists
        valid &= ~lessThan(zeroIndex, 10)              // PS has at least 8 bytes
        return (valid, zeroIndex + 1)
    }

    /// 0xFF when `byte` is zero, else 0.
    @inline(__always) static func isZero(_ byte: UInt8) -> UInt8 {
        UInt8(truncatingIfNeeded: (UInt32(byte) &- 1) >> 31 & 1) &* 0xFF
    }

    @inline(__always) static func select(_ mask: UInt8, _ a: Int, _ b: Int) -> Int {
        let wide = Int(Int8(bitPattern: mask))  // 0xFF → -1 (all ones), 0 → 0
        return (a & wide) | (b & ~wide)
    }

    /// 0xFF when a < b (both small non-negative), else 0.
    @inline(__always) static func lessThan(_ a: Int, _ b: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: ((a &- b) >> (Int.bitWidth - 1)) & 1) &* 0xFF
    }

    /// A fixed block smaller than any modulus (…0002), decrypted in place of a missing
    /// one so that malformed input costs the same RSA work.
    private static func dummyBlock(_ k: Int) -> [UInt8] {
        var block = [UInt8](repeating: 0, count: k)
        block[k - 1] = 2
        return block
    }
}
