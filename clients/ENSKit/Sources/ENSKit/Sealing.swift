public import Foundation
internal import Crypto
internal import CryptoExtras

/// Seals request parameters for one user the way ENS opens them (docs/api.md, "Sealed
/// parameters"): RSA PKCS#1 v1.5 encryption under the user's public key, the plaintext
/// in chunks of at most k − 11 bytes (k the modulus length), the k-byte ciphertexts
/// concatenated, standard base64.
///
/// PKCS#1 v1.5 *encryption* comes from swift-crypto's `CryptoExtras` (`_RSA.Encryption`,
/// BoringSSL on every platform), so ENSKit needs no platform code for it. The padding's
/// known weakness is a decryption oracle, which is the server's side: ENS opens every
/// block with implicit rejection and answers every failure with the same bytes.
public struct ENSSealer: Sendable {
    /// The key as DER: swift-crypto's RSA key types are not Sendable, so each seal
    /// parses it again (microseconds beside the RSA operations).
    private let publicKeyDER: Data
    /// The modulus length in bytes (256 for RSA-2048).
    public let blockSize: Int
    /// The PEM as ENS gave it, to compare with a later answer.
    public let publicKeyPEM: String

    /// Blocks ENS accepts in `creds` (64 × 245 bytes, about 15 KiB).
    public static let maximumCredentialBlocks = 64
    /// Blocks ENS accepts in every other sealed parameter (980 bytes of plaintext).
    public static let maximumBlocks = 4

    /// A sealer for the public key `/getpublickey` answered (a PEM `PUBLIC KEY`).
    public init(publicKeyPEM: String) throws(ENSError) {
        let key: _RSA.Encryption.PublicKey
        do {
            key = try _RSA.Encryption.PublicKey(pemRepresentation: publicKeyPEM)
        } catch {
            throw .unusablePublicKey
        }
        publicKeyDER = key.derRepresentation
        blockSize = key.keySizeInBits / 8
        self.publicKeyPEM = publicKeyPEM
    }

    /// `plaintext` sealed, in base64; at most `maximumBlocks` ciphertext blocks.
    public func seal(_ plaintext: Data, maximumBlocks: Int = ENSSealer.maximumBlocks) throws(ENSError) -> String {
        let step = blockSize - 11
        // An empty plaintext is still one block, as ENS's reference sealer makes it.
        let chunks = stride(from: 0, to: max(plaintext.count, 1), by: step).map { start in
            plaintext.subdata(in: plaintext.startIndex + start..<plaintext.startIndex + min(start + step, plaintext.count))
        }
        guard chunks.count <= maximumBlocks else {
            throw .invalidArgument("the sealed value needs \(chunks.count) blocks; ENS accepts \(maximumBlocks)")
        }
        let key: _RSA.Encryption.PublicKey
        do {
            key = try _RSA.Encryption.PublicKey(derRepresentation: publicKeyDER)
        } catch {
            throw .unusablePublicKey
        }
        var sealed = Data()
        sealed.reserveCapacity(chunks.count * blockSize)
        for chunk in chunks {
            do {
                sealed.append(try key.encrypt(chunk, padding: ._WEAK_AND_INSECURE_PKCS_V1_5))
            } catch {
                throw .unusablePublicKey
            }
        }
        return sealed.base64EncodedString()
    }

    /// A JSON object sealed for one use: `purpose` (`"<endpoint>.<parameter>"`) and
    /// `sealedAt` (milliseconds since the epoch) are added, so ENS refuses the value
    /// anywhere else and after `sealed.max_age_seconds` (docs/api.md, "Sealed values").
    func seal<Payload: Encodable>(_ payload: Payload, purpose: String, at time: Date,
                                  maximumBlocks: Int = ENSSealer.maximumBlocks) throws(ENSError) -> String {
        try seal(payload, purpose: purpose, atMilliseconds: Self.milliseconds(time), maximumBlocks: maximumBlocks)
    }

    func seal<Payload: Encodable>(_ payload: Payload, purpose: String, atMilliseconds sealedAt: Int64,
                                  maximumBlocks: Int = ENSSealer.maximumBlocks) throws(ENSError) -> String {
        try seal(try WireJSON.encode(Bound(payload: payload, purpose: purpose, sealedAt: sealedAt)), maximumBlocks: maximumBlocks)
    }

    static func milliseconds(_ time: Date) -> Int64 { Int64((time.timeIntervalSince1970 * 1000).rounded(.down)) }
}
