internal import Codecs
public import OpenSSL

/// The part of an Exchange callback URL after `/ews/`: `<record id>/<generation>/<blob>`.
///
/// The blob is `sealed ‖ mac`: `sealed` is the credentials payload under AES-256-GCM
/// with a key derived from the master key *and* the record's own sealed key material,
/// so only this record, while it exists, plus the master key, can open it; `mac` is 16
/// bytes of HMAC-SHA-256 under a master-derived key over the record id, generation and
/// `sealed`. The MAC lets a forged, truncated or altered URL be refused (HTTP 4xx)
/// before any database work; the record-bound seal makes a deleted record's URLs
/// unopenable for good. Record id and generation travel in clear (they are not
/// secret) and are bound by both the MAC and the seal's associated data.
public struct CallbackToken: Sendable, Equatable {
    public let recordID: Int64
    public let generation: Int64
    let sealed: [UInt8]

    static let macSize = 16

    /// Reads and authenticates the path suffix. Nil for anything forged or malformed.
    public init?(path suffix: String, vault: Vault) {
        let parts = suffix.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let recordID = PathNumber.decimal(parts[0]), let generation = PathNumber.decimal(parts[1]),
              parts[2].utf8.count <= 4096,
              let blob = Base64.decodeURLSafe(String(parts[2])), blob.count > Self.macSize + AESGCMKey.nonceSize + AESGCMKey.tagSize else {
            return nil
        }
        let sealed = Array(blob.dropLast(Self.macSize))
        let expected = Self.mac(vault: vault, recordID: recordID, generation: generation, sealed: sealed)
        guard Digest.constantTimeEqual(expected, Array(blob.suffix(Self.macSize))) else { return nil }
        self.recordID = recordID
        self.generation = generation
        self.sealed = sealed
    }

    /// Seals `payload` for a record and returns the path suffix.
    public static func make(payload: [UInt8], recordID: Int64, generation: Int64, recordKeyMaterial: [UInt8], vault: Vault) throws -> String {
        let key = try sealingKey(vault: vault, recordID: recordID, recordKeyMaterial: recordKeyMaterial)
        let sealed = try key.seal(payload, associatedData: header(recordID, generation))
        let blob = sealed + mac(vault: vault, recordID: recordID, generation: generation, sealed: sealed)
        return "\(recordID)/\(generation)/\(Base64.encodeURLSafe(blob))"
    }

    /// Opens the payload with the record's key material (its sealed private key).
    public func open(recordKeyMaterial: [UInt8], vault: Vault) throws -> [UInt8] {
        let key = try Self.sealingKey(vault: vault, recordID: recordID, recordKeyMaterial: recordKeyMaterial)
        return try key.open(sealed, associatedData: Self.header(recordID, generation))
    }

    private static func header(_ recordID: Int64, _ generation: Int64) -> [UInt8] {
        Array("ens-callback/1/\(recordID)/\(generation)".utf8)
    }

    private static func mac(vault: Vault, recordID: Int64, generation: Int64, sealed: [UInt8]) -> [UInt8] {
        Array(Digest.hmacSHA256(key: vault.callbackMACKey, message: header(recordID, generation) + [0x2F] + sealed).prefix(macSize))
    }

    private static func sealingKey(vault: Vault, recordID: Int64, recordKeyMaterial: [UInt8]) throws -> AESGCMKey {
        try AESGCMKey(bytes: Digest.hmacSHA256(key: vault.callbackSealBase, message: Array("record/\(recordID)/".utf8) + recordKeyMaterial))
    }
}
