internal import Codecs
public import OpenSSL
import Synchronization

/// ENS preview encryption, version 1 (the `encrypted` privacy mode; the
/// construction, a test vector and reference decryptors are in docs/privacy.md).
///
/// ECIES to the device's P-256 key (`P256Box`): a fresh ephemeral key pair (e, E) per message,
/// Z = ECDH(e, R), K = HKDF-SHA256(Z, salt: E ‖ R, info: "ENS preview v1", 32 bytes),
/// then AES-256-GCM under K with a random nonce and the notification id as associated
/// data. Blob: 0x01 ‖ E (65) ‖ nonce (12) ‖ ciphertext ‖ tag (16); everything after
/// the first 66 bytes is CryptoKit's `AES.GCM.SealedBox.combined`.
///
/// The salt holds both public keys, so K belongs to this ephemeral key *and* this
/// recipient; the associated data holds the id, so a blob moved into another
/// notification does not open there.
public enum PreviewEncryption {
    public static let version = P256Box.version
    static let info = Array("ENS preview v1".utf8)
    /// An empty plaintext's blob.
    public static let minimumBlobSize = P256Box.minimumBlobSize

    /// The device's public key as it sends it: base64 (standard alphabet, padding
    /// optional) of the 65-byte uncompressed point or the 91-byte SubjectPublicKeyInfo.
    public static func recipientKey(base64: String) throws(PreviewEncryptionError) -> P256PublicKey {
        // Room for the longest form's 124 characters with line breaks; garbage costs no more.
        guard base64.utf8.count <= 4 * P256PublicKey.subjectPublicKeyInfoSize else {
            throw .recipientKeyRefused(reason: "longer than any accepted key")
        }
        guard let bytes = Base64.decodeLenient(base64) else { throw .recipientKeyRefused(reason: "not base64") }
        do {
            return try P256PublicKey(bytes: bytes)
        } catch {
            throw .recipientKeyRefused(reason: error.reasons.joined(separator: "; "))
        }
    }

    /// A stored device key (its 65-byte point) ready to seal to. Keys are parsed once
    /// per process and kept (up to `cachedKeys`, then the cache starts over): a device
    /// gets many pushes, and OpenSSL 3's key decoder costs more than a seal.
    public static func recipientKey(x963: [UInt8]) throws(PreviewEncryptionError) -> P256PublicKey {
        if let cached = parsedKeys.withLock({ $0[x963] }) { return cached }
        let key: P256PublicKey
        do {
            key = try P256PublicKey(bytes: x963)
        } catch {
            throw .recipientKeyRefused(reason: error.reasons.joined(separator: "; "))
        }
        parsedKeys.withLock { keys in
            if keys.count >= cachedKeys { keys.removeAll(keepingCapacity: true) }
            keys[x963] = key
        }
        return key
    }

    static let cachedKeys = 4096
    private static let parsedKeys = Mutex<[[UInt8]: P256PublicKey]>([:])

    /// Seals `plaintext` (the caller's JSON) to `recipient` for the notification
    /// `notificationID` (32 lowercase hex digits). Returns the blob; the caller
    /// base64-encodes it.
    public static func seal(_ plaintext: [UInt8], to recipient: P256PublicKey, notificationID: String) throws(PreviewEncryptionError) -> [UInt8] {
        guard isNotificationID(notificationID) else { throw .malformedNotificationID }
        do {
            return try P256Box.seal(plaintext, to: recipient, info: info, associatedData: Array(notificationID.utf8))
        } catch {
            throw .sealingFailed(error)
        }
    }

    /// `seal` with the ephemeral key and the nonce given: for test vectors only.
    static func seal(_ plaintext: [UInt8], to recipient: P256PublicKey, notificationID: String,
                     ephemeralKey: P256KeyAgreementKey, nonce: [UInt8]) throws(PreviewEncryptionError) -> [UInt8] {
        guard isNotificationID(notificationID) else { throw .malformedNotificationID }
        do {
            return try P256Box.seal(plaintext, to: recipient, info: info, associatedData: Array(notificationID.utf8),
                                    ephemeralKey: ephemeralKey, nonce: nonce)
        } catch {
            throw .sealingFailed(error)
        }
    }

    /// The reference decryptor (what a device does; ENS itself never opens a preview).
    /// Every failure — wrong version, short blob, bad point, wrong key, wrong id,
    /// altered bytes — is the one `cannotOpen`.
    public static func open(_ blob: [UInt8], with key: P256KeyAgreementKey, notificationID: String) throws(PreviewEncryptionError) -> [UInt8] {
        guard let plaintext = P256Box.open(blob, with: key, info: info, associatedData: Array(notificationID.utf8)) else { throw .cannotOpen }
        return plaintext
    }

    /// Notification ids are 32 lowercase hex digits (16 bytes of a SHA-256). The device
    /// authenticates the id it was sent, so a different spelling would not open.
    static func isNotificationID(_ id: String) -> Bool {
        id.utf8.count == 32 && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}

/// Why a preview was not sealed or opened. The descriptions are safe to log: they
/// never quote a key, an id or a blob.
public enum PreviewEncryptionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The device's key is not a P-256 public key in an accepted form; `reason` is
    /// fixed text (ours or OpenSSL's), never the input.
    case recipientKeyRefused(reason: String)
    /// `seal` was given an id that is not 32 lowercase hex digits: a caller's bug.
    case malformedNotificationID
    /// OpenSSL failed while sealing (randomness, key generation).
    case sealingFailed(OpenSSLError)
    /// The blob does not open with this key and id. One case for every cause, so a
    /// decryptor that reports it gives an attacker nothing to tell causes apart.
    case cannotOpen

    public var description: String {
        switch self {
        case .recipientKeyRefused(let reason): "encryption key refused: \(reason)"
        case .malformedNotificationID: "notification id is not 32 lowercase hex digits"
        case .sealingFailed(let error): "preview encryption failed: \(error)"
        case .cannotOpen: "cannot open the encrypted preview"
        }
    }
}
