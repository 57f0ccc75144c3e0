internal import Codecs
internal import OpenSSL

/// The part of a Graph notification URL after `/graph/`: the record id and generation
/// sealed with AES-256-GCM under a master-derived key (`r2.<base64url>`; 12-byte nonce,
/// 16 bytes of plaintext, 16-byte tag: 62 characters in all). It carries no credential and
/// reveals nothing, not even the record id: it tells the endpoint which record a POST
/// claims to be for, lets a forged or altered URL be dropped before any database work,
/// and keeps record ids from being enumerated or counted. What proves a notification
/// genuine is its clientState (`Vault.graphClientState`).
///
/// With a shard map the URL also names the user's bucket (`r3.`, `b3.`; docs/scaling.md).
///
/// Subscriptions created before 2026-11-25 carry `<record id>/<generation>/<mac>` (the
/// MAC being 16 bytes of HMAC-SHA-256 over them): Graph keeps a subscription's URL for
/// its whole life, renewals included, so that form is still read.
public struct RoutingToken: Sendable, Equatable {
    public let recordID: Int64
    public let generation: Int64
    /// For a rich (`blind`) subscription's URL (`b2.<base64url>`, record id and the
    /// `GraphBlindSubscriptions` id sealed alike under other associated data): which one,
    /// so a notification is routed with one query. Nil for a record's own subscription.
    public let blindID: Int64?
    /// The user's bucket (`ShardMap`), which URLs made with a shard map carry sealed
    /// with the rest (`r3.`, `b3.`: two more bytes); nil in the forms before sharding,
    /// whose notifications go to shard 0.
    public let bucket: Int?

    static let macSize = 16
    static let sealedPrefix = "r2."
    static let blindPrefix = "b2."
    static let bucketPrefix = "r3."
    static let blindBucketPrefix = "b3."
    private static let associatedData = Array("ens-graph-route/2".utf8)
    private static let blindAssociatedData = Array("ens-graph-route/blind/2".utf8)
    private static let bucketAssociatedData = Array("ens-graph-route/3".utf8)
    private static let blindBucketAssociatedData = Array("ens-graph-route/blind/3".utf8)

    public init(recordID: Int64, generation: Int64, bucket: Int? = nil) {
        precondition(bucket.map { (0..<4096).contains($0) } ?? true, "a bucket is 0..<4096")
        self.recordID = recordID
        self.generation = generation
        self.blindID = nil
        self.bucket = bucket
    }

    /// The URL of the record's rich subscription `blindID`.
    public init(recordID: Int64, blindID: Int64, bucket: Int? = nil) {
        precondition(bucket.map { (0..<4096).contains($0) } ?? true, "a bucket is 0..<4096")
        self.recordID = recordID
        self.generation = 0
        self.blindID = blindID
        self.bucket = bucket
    }

    /// Reads and authenticates a path suffix; nil for anything forged or malformed.
    public init?(path suffix: String, vault: Vault) {
        // (prefix, associated data, whether it is a blind route, whether it names a bucket)
        let sealedForms: [(String, [UInt8], Bool, Bool)] = [
            (Self.sealedPrefix, Self.associatedData, false, false), (Self.blindPrefix, Self.blindAssociatedData, true, false),
            (Self.bucketPrefix, Self.bucketAssociatedData, false, true), (Self.blindBucketPrefix, Self.blindBucketAssociatedData, true, true),
        ]
        if let (prefix, associatedData, blind, withBucket) = sealedForms.first(where: { suffix.hasPrefix($0.0) }) {
            let encoded = suffix.dropFirst(prefix.count)
            guard encoded.utf8.count <= 64, let sealed = Base64.decodeURLSafe(String(encoded)),
                  let plain = try? vault.routingSealKey.open(sealed,
                      associatedData: associatedData), plain.count == (withBucket ? 18 : 16) else { return nil }
            let recordID = SealedNumbers.int64(plain, at: 0)
            let second = SealedNumbers.int64(plain, at: 8)
            let bucket = withBucket ? SealedNumbers.bucket(plain, at: 16) : nil
            guard recordID >= 0, second >= 0, !withBucket || bucket != nil else { return nil }
            if blind { self.init(recordID: recordID, blindID: second, bucket: bucket) } else { self.init(recordID: recordID,
                generation: second, bucket: bucket) }
            return
        }
        let parts = suffix.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, let recordID = PathNumber.decimal(parts[0]), let generation = PathNumber.decimal(parts[1]),
              parts[2].utf8.count <= 64, let mac = Base64.decodeURLSafe(String(parts[2])), mac.count == Self.macSize else { return nil }
        guard Digest.constantTimeEqual(mac, Self.mac(vault: vault, recordID: recordID, generation: generation)) else { return nil }
        self.init(recordID: recordID, generation: generation)
    }

    /// The path suffix for this record and generation (sealed; a new nonce each time).
    /// Sealing fails only if OpenSSL cannot draw random bytes; then the authenticated
    /// (older) form still routes correctly, it just shows the record id (and, naming no
    /// bucket, routes only while the bucket is shard 0's).
    public func path(vault: Vault) -> String {
        precondition(blindID == nil, "a rich subscription's URL is blindPath's")
        let plain = SealedNumbers.bytes(recordID) + SealedNumbers.bytes(generation) + (bucket.map(SealedNumbers.bytes(bucket:)) ?? [])
        guard let sealed = try? vault.routingSealKey.seal(plain,
                                                          associatedData: bucket == nil ? Self.associatedData : Self.bucketAssociatedData) else {
            return legacyPath(vault: vault)
        }
        return (bucket == nil ? Self.sealedPrefix : Self.bucketPrefix) + Base64.encodeURLSafe(sealed)
    }

    /// The path suffix of a rich (`blind`) subscription's URL. It has no older form to
    /// fall back on, so a failure to seal (no random bytes) throws, and the subscription
    /// is not made.
    public func blindPath(vault: Vault) throws -> String {
        guard let blindID else { preconditionFailure("blindPath of a record's own subscription") }
        let plain = SealedNumbers.bytes(recordID) + SealedNumbers.bytes(blindID) + (bucket.map(SealedNumbers.bytes(bucket:)) ?? [])
        let associatedData = bucket == nil ? Self.blindAssociatedData : Self.blindBucketAssociatedData
        return (bucket == nil ? Self.blindPrefix : Self.blindBucketPrefix)
            + Base64.encodeURLSafe(try vault.routingSealKey.seal(plain, associatedData: associatedData))
    }

    /// The form subscriptions created before 2026-11-25 carry (for tests of that form).
    func legacyPath(vault: Vault) -> String {
        "\(recordID)/\(generation)/\(Base64.encodeURLSafe(Self.mac(vault: vault, recordID: recordID, generation: generation)))"
    }

    private static func mac(vault: Vault, recordID: Int64, generation: Int64) -> [UInt8] {
        Array(Digest.hmacSHA256(key: vault.routingMACKey, message: Array("ens-graph-route/1/\(recordID)/\(generation)".utf8)).prefix(macSize))
    }
}

/// The numbers sealed callback tokens carry, big-endian.
enum SealedNumbers {
    static func bytes(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    static func bytes(bucket: Int) -> [UInt8] {
        [UInt8(truncatingIfNeeded: bucket >> 8), UInt8(truncatingIfNeeded: bucket)]
    }

    static func int64(_ bytes: [UInt8], at offset: Int) -> Int64 {
        bytes[offset..<(offset + 8)].reduce(Int64(0)) { $0 << 8 | Int64($1) }
    }

    /// A bucket (two bytes, below 4096); nil for anything larger.
    static func bucket(_ bytes: [UInt8], at offset: Int) -> Int? {
        let value = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
        return value < 4096 ? value : nil
    }
}

/// The numbers callback paths carry.
enum PathNumber {
    /// A decimal number without sign or leading zeros, as this code writes them.
    static func decimal(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              text == "0" || !text.hasPrefix("0") else { return nil }
        return Int64(text)
    }
}
