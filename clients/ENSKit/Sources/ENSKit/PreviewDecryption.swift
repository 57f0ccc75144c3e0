public import Foundation
internal import Crypto

/// Opens ENS preview encryption, version 1 (docs/privacy.md, "Encrypted previews"):
/// `blob = 0x01 ‖ E ‖ nonce ‖ ciphertext ‖ tag`, with
/// `K = HKDF-SHA256(ECDH(r, E), salt = E ‖ R, info = "ENS preview v1")` and AES-256-GCM
/// under `K`, the notification id (ASCII) as associated data.
public enum PreviewDecryption {
    static let version: UInt8 = 1
    static let info = Data("ENS preview v1".utf8)

    /// Why a blob did not open. A device shows the generic alert whatever the reason,
    /// and tells neither the user nor ENS which step failed.
    public enum Failure: Error, Sendable, Equatable {
        /// Not version 1, or too short.
        case malformed
        /// Wrong key, wrong notification id, or an altered blob.
        case doesNotOpen
    }

    /// The plaintext of `blob` for notification `id`, with the device's key.
    public static func open(_ blob: Data, id: String, with key: ENSPreviewKey) throws(Failure) -> Data {
        let bytes = [UInt8](blob)
        guard bytes.count >= 1 + 65 + 12 + 16, bytes[0] == version else { throw .malformed }
        let ephemeral = Data(bytes[1..<66])
        do {
            let peer = try P256.KeyAgreement.PublicKey(x963Representation: ephemeral)
            let shared = try key.key.sharedSecretFromKeyAgreement(with: peer)
            let messageKey = shared.hkdfDerivedSymmetricKey(using: SHA256.self, salt: ephemeral + key.publicKeyX963,
                                                            sharedInfo: info, outputByteCount: 32)
            let box = try AES.GCM.SealedBox(combined: Data(bytes[66...]))
            return try AES.GCM.open(box, using: messageKey, authenticating: Data(id.utf8))
        } catch {
            throw .doesNotOpen
        }
    }
}
