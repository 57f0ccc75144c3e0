internal import Codecs
internal import OpenSSL

/// The routing token an account's IMAP METADATA carries for Dovecot's push plugin, and
/// which every push from its server names: the record id and subscription generation
/// (and with a shard map the user's bucket), sealed with AES-256-GCM under a
/// master-derived key with the server's name as associated data. It reveals nothing
/// and holds no credential; it opens only for the server it was issued for, so a
/// server's hook cannot speak for another server's accounts, and a token read from one
/// mailbox's METADATA is worth nothing elsewhere.
///
/// `d1.<base64url>` (12-byte nonce, 16 bytes of plaintext, 16-byte tag: 62 characters),
/// `d2.` with a bucket (two more bytes). Only `A-Z a-z 0-9 . _ -`: what Dovecot's
/// METADATA value, the ox driver's `user=` field and libcurl's custom command carry as is.
public struct DovecotRoute: Sendable, Equatable {
    public let recordID: Int64
    public let generation: Int64
    public let bucket: Int?

    static let prefix = "d1."
    static let bucketPrefix = "d2."

    public init(recordID: Int64, generation: Int64, bucket: Int? = nil) {
        precondition(bucket.map { (0..<4096).contains($0) } ?? true, "a bucket is 0..<4096")
        self.recordID = recordID
        self.generation = generation
        self.bucket = bucket
    }

    private static func associatedData(server: String, withBucket: Bool) -> [UInt8] {
        Array("ens-dovecot-route/\(withBucket ? 2 : 1)/\(server)".utf8)
    }

    /// Reads and authenticates a token sent by `server`; nil for anything forged,
    /// malformed, or issued for another server.
    public init?(token: String, server: String, vault: Vault) {
        let withBucket = token.hasPrefix(Self.bucketPrefix)
        guard withBucket || token.hasPrefix(Self.prefix) else { return nil }
        let encoded = token.dropFirst(3)
        guard encoded.utf8.count <= 64, let sealed = Base64.decodeURLSafe(String(encoded)),
              let plain = try? vault.dovecotRouteSealKey.open(sealed, associatedData: Self.associatedData(server: server, withBucket: withBucket)),
              plain.count == (withBucket ? 18 : 16) else { return nil }
        let recordID = SealedNumbers.int64(plain, at: 0)
        let generation = SealedNumbers.int64(plain, at: 8)
        let bucket = withBucket ? SealedNumbers.bucket(plain, at: 16) : nil
        guard recordID >= 0, generation >= 0, !withBucket || bucket != nil else { return nil }
        self.init(recordID: recordID, generation: generation, bucket: bucket)
    }

    /// The token for `server` (a new nonce each time). Sealing fails only when OpenSSL
    /// cannot draw random bytes; then no token is made and the registration fails.
    public func token(server: String, vault: Vault) throws -> String {
        let plain = SealedNumbers.bytes(recordID) + SealedNumbers.bytes(generation) + (bucket.map(SealedNumbers.bytes(bucket:)) ?? [])
        let sealed = try vault.dovecotRouteSealKey.seal(plain, associatedData: Self.associatedData(server: server, withBucket: bucket != nil))
        return (bucket == nil ? Self.prefix : Self.bucketPrefix) + Base64.encodeURLSafe(sealed)
    }
}
