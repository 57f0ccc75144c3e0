public import Foundation
internal import Crypto
internal import CryptoExtras

/// Seals request parameters for one user the way ENS opens them (docs/api.md, "Sealed
/// parameters"), in one of two forms:
///
/// - ``Form/envelope`` (`e1:`): a random AES-256 key sealed with RSA PKCS#1 v1.5 under
///   the user's public key, then the plaintext under AES-256-GCM with it. The plaintext
///   is sealed as one piece, so no one who sees the value can keep part of it and
///   replace the rest. ENS 0.6.0 and later open it, and say so when they give the key.
/// - ``Form/chunked``: RSA PKCS#1 v1.5 encryption of the plaintext in chunks of at most
///   k − 11 bytes (k the modulus length), the k-byte ciphertexts concatenated, standard
///   base64: what every ENS opens, and what ENSKit seals for a key whose answer did
///   not name envelopes.
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
    /// How values are sealed.
    public let form: Form

    /// A sealed value's form; the raw value is the name ENS's `ENS-Sealing` header gives.
    public enum Form: String, Sendable {
        case chunked
        case envelope = "e1"
    }

    /// The associated data of an envelope's AES-GCM.
    static let envelopeAssociatedData = Data("ens-envelope/1".utf8)

    /// Blocks ENS accepts in `creds` (64 × 245 bytes, about 15 KiB).
    public static let maximumCredentialBlocks = 64
    /// Blocks ENS accepts in every other sealed parameter (980 bytes of plaintext).
    public static let maximumBlocks = 4

    /// A sealer for the public key `/getpublickey` answered (a PEM `PUBLIC KEY`), in
    /// the form its answer named (chunked when it named none).
    public init(publicKeyPEM: String, form: Form = .chunked) throws(ENSError) {
        let key: _RSA.Encryption.PublicKey
        do {
            key = try _RSA.Encryption.PublicKey(pemRepresentation: publicKeyPEM)
        } catch {
            throw .unusablePublicKey
        }
        publicKeyDER = key.derRepresentation
        blockSize = key.keySizeInBits / 8
        self.publicKeyPEM = publicKeyPEM
        self.form = form
    }

    /// `plaintext` sealed in this sealer's form: at most what `maximumBlocks` chunks hold
    /// (each k − 11 bytes), as ENS accepts for the parameter.
    public func seal(_ plaintext: Data, maximumBlocks: Int = ENSSealer.maximumBlocks) throws(ENSError) -> String {
        let step = blockSize - 11
        if form == .envelope {
            // As long as the chunked form of the same parameter could be, no longer.
            guard plaintext.count <= maximumBlocks * step else {
                throw .invalidArgument("the sealed value holds \(plaintext.count) bytes; ENS accepts \(maximumBlocks * step)")
            }
            return try envelope(plaintext)
        }
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

    /// `e1:` and base64 of: the RSA block sealing a fresh AES-256 key, the 12-byte
    /// nonce, the plaintext under AES-256-GCM, the 16-byte tag.
    private func envelope(_ plaintext: Data) throws(ENSError) -> String {
        let key: _RSA.Encryption.PublicKey
        do {
            key = try _RSA.Encryption.PublicKey(derRepresentation: publicKeyDER)
        } catch {
            throw .unusablePublicKey
        }
        let contentKey = SymmetricKey(size: .bits256)
        let sealedKey: Data
        do {
            sealedKey = try key.encrypt(contentKey.withUnsafeBytes { Data($0) }, padding: ._WEAK_AND_INSECURE_PKCS_V1_5)
        } catch {
            throw .unusablePublicKey
        }
        let box: AES.GCM.SealedBox
        do {
            box = try AES.GCM.seal(plaintext, using: contentKey, authenticating: Self.envelopeAssociatedData)
        } catch {
            preconditionFailure("AES-256-GCM refused a fresh 256-bit key: \(error)")
        }
        // The default nonce is 12 bytes, so the combined form (nonce ‖ ciphertext ‖ tag) exists.
        guard let combined = box.combined else { preconditionFailure("an AES-GCM box with a 12-byte nonce has a combined form") }
        return Form.envelope.rawValue + ":" + (sealedKey + combined).base64EncodedString()
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

/// Hands out `sealedAt` values, each strictly later than the one before: two calls in
/// one millisecond (two pushes' contents fetched at once) get two times.
final class SealingClock: @unchecked Sendable {
    // @unchecked: `last` is read and written under `lock` only.
    private let lock = NSLock()
    private var last = Int64.min

    /// `now`, or a millisecond after the last time handed out if that is not earlier.
    func next(after now: Int64) -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        last = max(now, last + 1)
        return last
    }
}
