public import Foundation
internal import Crypto
internal import CryptoExtras

/// The device's P-256 key-agreement key for the `encrypted` mode: ENS seals each
/// preview to its public half (docs/privacy.md, "Encrypted previews"). ``ENSClient``
/// makes one per user at the first registration that asks for `encrypted`, keeps it in
/// its ``ENSKeyStore`` and sends the public half as `privacyKey`.
public struct ENSPreviewKey: Sendable {
    let key: P256.KeyAgreement.PrivateKey

    /// A new random key.
    public init() { key = P256.KeyAgreement.PrivateKey() }

    /// The key from its 32-byte raw scalar (``rawRepresentation``).
    public init(rawRepresentation: Data) throws(ENSError) {
        do {
            key = try P256.KeyAgreement.PrivateKey(rawRepresentation: rawRepresentation)
        } catch {
            throw .invalidArgument("not a P-256 private key")
        }
    }

    /// The private scalar: what the key store keeps. A secret.
    public var rawRepresentation: Data { key.rawRepresentation }

    /// The 65-byte uncompressed public point (`0x04 ‖ X ‖ Y`), as ENS keeps it.
    public var publicKeyX963: Data { key.publicKey.x963Representation }
}

/// The device's RSA key for Microsoft Graph's encrypted rich notifications (the blind
/// mode): Graph wraps each notification's symmetric key to its public half with
/// RSA-OAEP (SHA-1); see ``BlindContent``.
public struct ENSBlindKey: Sendable {
    /// The private key as DER: swift-crypto's RSA key types are not Sendable.
    public let derRepresentation: Data

    var key: _RSA.Encryption.PrivateKey {
        get throws { try _RSA.Encryption.PrivateKey(derRepresentation: derRepresentation) }
    }

    /// A new RSA key of `bits` (2048, 3072 or 4096).
    public init(bits: Int = 2048) throws(ENSError) {
        do {
            derRepresentation = try _RSA.Encryption.PrivateKey(keySize: .init(bitCount: bits)).derRepresentation
        } catch {
            throw .invalidArgument("cannot make an RSA key of \(bits) bits")
        }
    }

    /// The key from PKCS#8 or PKCS#1 PEM.
    public init(pemRepresentation: String) throws(ENSError) {
        do {
            derRepresentation = try _RSA.Encryption.PrivateKey(pemRepresentation: pemRepresentation).derRepresentation
        } catch {
            throw .invalidArgument("not an RSA private key of 2048 bits or more")
        }
    }

    /// The key from DER (``derRepresentation``).
    public init(derRepresentation: Data) throws(ENSError) {
        do {
            self.derRepresentation = try _RSA.Encryption.PrivateKey(derRepresentation: derRepresentation).derRepresentation
        } catch {
            throw .invalidArgument("not an RSA private key of 2048 bits or more")
        }
    }

    /// The private key as PEM. A secret.
    public var pemRepresentation: String { (try? key.pemRepresentation) ?? "" }
    /// The public half as a PEM `PUBLIC KEY`: what Graph's encryption certificate holds.
    public var publicKeyPEM: String { (try? key.publicKey.pemRepresentation) ?? "" }
}
