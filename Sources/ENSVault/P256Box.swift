internal import OpenSSL

/// ECIES to a P-256 key, the construction both the preview encryption (to a device's
/// key) and the fresh-credentials box (to a subscription's key) use, each with its own
/// HKDF `info` and associated data, so a blob made for one never opens as the other.
///
/// A fresh ephemeral key pair (e, E) per blob, Z = ECDH(e, R),
/// K = HKDF-SHA256(Z, salt: E ‖ R, info, 32 bytes), then AES-256-GCM under K with a
/// random nonce. Blob: 0x01 ‖ E (65) ‖ nonce (12) ‖ ciphertext ‖ tag (16).
enum P256Box {
    static let version: UInt8 = 1
    /// Version byte and ephemeral point: what comes before the sealed box.
    static let headerSize = 1 + P256PublicKey.x963Size
    /// An empty plaintext's blob.
    static let minimumBlobSize = headerSize + AESGCMKey.nonceSize + AESGCMKey.tagSize

    static func seal(_ plaintext: [UInt8], to recipient: P256PublicKey, info: [UInt8], associatedData: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        try seal(plaintext, to: recipient, info: info, associatedData: associatedData,
                 ephemeralKey: P256KeyAgreementKey.generate(), nonce: Digest.randomBytes(AESGCMKey.nonceSize))
    }

    /// `seal` with the ephemeral key and the nonce given: for test vectors only. A
    /// reused ephemeral key and nonce would make two blobs share a key stream.
    static func seal(_ plaintext: [UInt8], to recipient: P256PublicKey, info: [UInt8], associatedData: [UInt8],
                     ephemeralKey: P256KeyAgreementKey, nonce: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        let key = try messageKey(agreement: ephemeralKey.sharedSecret(with: recipient), ephemeral: ephemeralKey.publicKey,
                                 recipient: recipient, info: info)
        return [version] + ephemeralKey.publicKey.x963 + (try key.seal(plaintext, associatedData: associatedData, nonce: nonce))
    }

    /// Nil for every failure alike (wrong version, short blob, bad point, wrong key,
    /// wrong associated data, altered bytes).
    static func open(_ blob: [UInt8], with key: P256KeyAgreementKey, info: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        guard blob.count >= minimumBlobSize, blob[0] == version else { return nil }
        do {
            let ephemeral = try P256PublicKey(bytes: Array(blob[1..<headerSize]))
            let messageKey = try messageKey(agreement: key.sharedSecret(with: ephemeral), ephemeral: ephemeral, recipient: key.publicKey, info: info)
            return try messageKey.open(Array(blob[headerSize...]), associatedData: associatedData)
        } catch {
            return nil
        }
    }

    /// K = HKDF-SHA256(IKM: Z, salt: E ‖ R, info, 32 bytes).
    static func messageKey(agreement: [UInt8], ephemeral: P256PublicKey, recipient: P256PublicKey, info: [UInt8]) throws(OpenSSLError) -> AESGCMKey {
        try AESGCMKey(bytes: HKDF.sha256(ikm: agreement, salt: ephemeral.x963 + recipient.x963, info: info, length: AESGCMKey.keySize))
    }
}
