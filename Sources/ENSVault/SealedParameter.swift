internal import Codecs
public import OpenSSL

/// Opens a *sealed* request parameter under the user record's key, in either of two
/// forms (docs/api.md, "Sealed parameters"):
///
/// - **chunked**: base64 of one or more RSA PKCS#1 v1.5 ciphertexts, each k bytes
///   (k = modulus size), each sealing up to k − 11 bytes of the plaintext. Each block
///   stands alone, so anyone holding the public key can add blocks of their own to a
///   logged value or replace some of its blocks; the single-use mark is taken on the
///   act a value asks for for that reason (`SealedOnce`).
/// - **envelope** (`e1:` and base64): one RSA PKCS#1 v1.5 ciphertext of a 32-byte
///   AES-256 key, then the plaintext under AES-256-GCM with that key (12-byte nonce ‖
///   ciphertext ‖ 16-byte tag, associated data `ens-envelope/1`). The plaintext is
///   authenticated as one piece: no part of it can be kept and the rest replaced.
///
/// Every failure — bad base64, a length that is not a multiple of k, a block that does
/// not decrypt, bad padding — costs the same work as a success: one RSA private-key
/// operation per k bytes of input. And, as in TLS's and OpenSSL 3.2's implicit
/// rejection, a block that fails is replaced by its own *synthetic* plaintext, derived
/// from that block and a secret of the key (`syntheticMessage`), while the blocks that
/// opened keep theirs. So an attacker who seals a long valid prefix and tampers with
/// the last block gets the same prefix parsed either way: whether the tampered block's
/// padding happened to be valid changes nothing the caller's parser does before it
/// fails. The caller answers every failure alike (`valid == false`). Padding is checked
/// in constant time, in Swift, because OpenSSL 3.0 reports PKCS#1 failures through its
/// error queue.
public enum SealedParameter {
    /// Upper bound on ciphertext blocks for `creds`: 64 × 245 bytes ≈ 15 KiB of
    /// plaintext, room for a PKCS#12 client certificate; anything larger is refused.
    public static let maximumBlocks = 64
    /// Every other sealed parameter is a token, a date, a flag or a sync key: 4 blocks
    /// (980 bytes) hold the largest of them (an /updatesynckey `info` with a 512-byte
    /// key) with room to spare, and a parameter cannot make a request cost 64 RSA
    /// operations.
    public static let maximumBlocksSmall = 4

    /// The plaintext, and whether every block opened. When not, the plaintext holds the
    /// synthetic stand-ins of the failed blocks; callers must treat both outcomes the
    /// same way up to the point of answering, and answer every failure with
    /// `APIError.sealedParameterRejected`.
    public static func open(_ text: String, with key: RSAPrivateKey, maximumBlocks: Int = maximumBlocksSmall) -> (plaintext: [UInt8], valid: Bool) {
        if isEnvelope(text) {
            return openEnvelope(String(text.dropFirst(envelopePrefix.count)), with: key, maximumBlocks: maximumBlocks)
        }
        let k = key.modulusByteCount
        let decoded = Base64.decodeLenient(text)
        let ciphertext = decoded ?? []
        let wellFormed = decoded != nil && !ciphertext.isEmpty && ciphertext.count % k == 0 && ciphertext.count / k <= maximumBlocks
        let blockCount = wellFormed ? ciphertext.count / k : min(max(1, (ciphertext.count + k - 1) / k), maximumBlocks)

        var valid: UInt8 = wellFormed ? 0xFF : 0
        var message: [UInt8] = []
        message.reserveCapacity(blockCount * (k - 11))
        for blockIndex in 0..<blockCount {
            let block = wellFormed ? Array(ciphertext[(blockIndex * k)..<((blockIndex + 1) * k)]) : dummyBlock(k)
            // Made before knowing whether it is needed, so valid and invalid blocks
            // cost the same.
            let synthetic = syntheticMessage(for: block, secret: key.rejectionSecret, maximumLength: k - 11)
            let decrypted = key.rawDecrypt(block: block)
            let encoded = decrypted ?? [UInt8](repeating: 0, count: k)
            var (blockValid, start) = unpadType2(encoded)
            blockValid &= decrypted == nil ? 0 : 0xFF
            valid &= blockValid
            if blockValid == 0xFF {
                message.append(contentsOf: encoded[min(start, encoded.count)...])
            } else {
                message.append(contentsOf: synthetic)
            }
        }
        return (message, valid == 0xFF)
    }

    /// The envelope form's name, as `/getpublickey`'s `ENS-Sealing` header gives it.
    public static let envelopeForm = "e1"
    /// What starts an envelope; never base64, so no chunked value can be read as one.
    public static let envelopePrefix = envelopeForm + ":"
    static let envelopeAssociatedData = Array("ens-envelope/1".utf8)

    /// Whether `text` is in the envelope form (it opens, if at all, only whole).
    public static func isEnvelope(_ text: String) -> Bool { text.utf8.starts(with: envelopePrefix.utf8) }

    /// An envelope's base64 (after `e1:`): its key block opened as a chunked value's
    /// blocks are, with implicit rejection, and the plaintext under that key. Every
    /// failure costs one RSA operation and one AES-GCM opening, as a success does: a key
    /// block whose padding fails, or that holds anything but 32 bytes, is replaced by a
    /// key derived from that block and the key's rejection secret, which opens nothing.
    /// The plaintext may be as long as `maximumBlocks` chunked blocks would hold.
    static func openEnvelope(_ text: String, with key: RSAPrivateKey, maximumBlocks: Int) -> (plaintext: [UInt8], valid: Bool) {
        let k = key.modulusByteCount
        let decoded = Base64.decodeLenient(text) ?? []
        let sealedLength = decoded.count - k - AESGCMKey.nonceSize - AESGCMKey.tagSize
        let wellFormed = sealedLength >= 0 && sealedLength <= maximumBlocks * (k - 11)
        let block = wellFormed ? Array(decoded[..<k]) : dummyBlock(k)
        let standIn = Digest.hmacSHA256(key: key.rejectionSecret, message: Array("envelope key".utf8) + block)
        let decrypted = key.rawDecrypt(block: block)
        let encoded = decrypted ?? [UInt8](repeating: 0, count: k)
        var (blockValid, start) = unpadType2(encoded)
        blockValid &= decrypted == nil ? 0 : 0xFF
        blockValid &= isZero(encoded.count - start - AESGCMKey.keySize)
        let keyBytes = blockValid == 0xFF ? Array(encoded[start...]) : standIn
        let sealed = wellFormed ? Array(decoded[k...]) : [UInt8](repeating: 0, count: AESGCMKey.nonceSize + AESGCMKey.tagSize)
        guard let aes = try? AESGCMKey(bytes: keyBytes),
              let plaintext = try? aes.open(sealed, associatedData: envelopeAssociatedData) else { return ([], false) }
        return (plaintext, wellFormed && blockValid == 0xFF)
    }

    /// A failed block's stand-in: HMAC-SHA-256 keyed by the key's rejection secret over
    /// the block gives a per-block key, from which a length (0 ... `maximumLength`) and
    /// that many bytes are drawn (HMAC in counter mode). The same block always gets the
    /// same stand-in, and no one without the private key can tell it from a real
    /// plaintext. (Versioned with the secret: "ENS implicit rejection v1".)
    static func syntheticMessage(for block: [UInt8], secret: [UInt8], maximumLength: Int) -> [UInt8] {
        let blockKey = Digest.hmacSHA256(key: secret, message: block)
        var stream: [UInt8] = []
        stream.reserveCapacity(maximumLength + 34)
        var counter: UInt32 = 0
        while stream.count < maximumLength + 2 {
            let label = Array("synthetic message".utf8) + [UInt8(counter >> 24), UInt8(counter >> 16 & 0xFF),
                                                           UInt8(counter >> 8 & 0xFF), UInt8(counter & 0xFF)]
            stream += Digest.hmacSHA256(key: blockKey, message: label)
            counter += 1
        }
        let length = Int(UInt16(stream[0]) << 8 | UInt16(stream[1])) % (maximumLength + 1)
        return Array(stream[2..<(2 + length)])
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

    /// 0xFF when `value` is zero, else 0.
    @inline(__always) static func isZero(_ value: Int) -> UInt8 {
        let nonzero = ((value | (0 &- value)) >> (Int.bitWidth - 1)) & 1
        return UInt8(truncatingIfNeeded: 1 &- nonzero) &* 0xFF
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
