internal import Codecs
internal import OpenSSL

/// The part of an Exchange callback URL after `/ews/`, in one of four forms.
///
/// **Sealed with its bucket** (registrations on a host with a shard map, docs/scaling.md):
/// `k3.` and the sealed form's box with two more bytes, the user's bucket (`ShardMap`),
/// so a callback finds its shard before any database work. The other forms name no
/// bucket and route to shard 0.
///
/// **Sealed** (what registrations make since 2026-11-27): `k2.` followed by base64url of
/// an AES-256-GCM box (12-byte nonce, 16-byte tag) under a master-derived key, holding
/// record id, generation and `key`. `key` is 32 random bytes made for this subscription;
/// the credentials themselves are in the database (table MailCredentials), sealed under
/// a key derived from the master key *and* `key` (`CredentialSeal`). The URL alone opens
/// nothing, and neither does the database, with or without the master key: a callback
/// brings the one part the database never holds. The URL stays short whatever the
/// credentials weigh, and shows no record id: ids are sequential, and one in clear let
/// anyone aim forged posts at a record or count the records.
///
/// **Keyed** (subscriptions made from 2026-11-26): `<record id>/<generation>/k.` followed
/// by base64url of `key ‖ mac`, the same key in clear beside a clear record id. Still
/// accepted: Exchange keeps a subscription's URL for its life, and the next registration
/// makes a sealed one.
///
/// **Carrying** (subscriptions made before): `<record id>/<generation>/` then `sealed ‖
/// mac`, the credentials sealed in the URL itself under a key derived from the master key
/// and the record's own sealed key material. Still accepted, so those subscriptions keep
/// working until they are renewed.
///
/// In the two older forms `mac` is 16 bytes of HMAC-SHA-256 under a master-derived key
/// over the record id, generation and the rest of the blob; in the sealed form the GCM
/// tag does that work. Either way a forged, truncated or altered URL is refused (HTTP
/// 4xx) before any database work.
public struct CallbackToken: Sendable, Equatable {
    public let recordID: Int64
    public let generation: Int64
    public let form: Form
    /// The user's bucket (`k3.` URLs); nil in the older forms.
    public let bucket: Int?

    public enum Form: Sendable, Equatable {
        /// The key that, with the master key, opens this subscription's stored credentials.
        case keyed(urlKey: [UInt8])
        /// The credentials themselves, sealed (subscriptions made before the keyed form).
        case carrying(sealed: [UInt8])
    }

    static let macSize = 16
    public static let urlKeySize = 32
    private static let keyedPrefix = "k."
    private static let sealedPrefix = "k2."
    private static let bucketPrefix = "k3."
    /// What the sealed forms' boxes are bound to, so no other sealed value opens as one.
    private static let sealedAssociatedData = Array("ens-callback/2".utf8)
    private static let bucketAssociatedData = Array("ens-callback/3".utf8)

    /// Reads and authenticates the path suffix. Nil for anything forged or malformed.
    public init?(path suffix: String, vault: Vault) {
        for withBucket in [false, true] where suffix.hasPrefix(withBucket ? Self.bucketPrefix : Self.sealedPrefix) {
            guard let (recordID, generation, bucket, urlKey) = Self.openSealed(suffix.dropFirst(Self.sealedPrefix.count), withBucket: withBucket,
                                                                               vault: vault) else { return nil }
            self.recordID = recordID
            self.generation = generation
            self.form = .keyed(urlKey: urlKey)
            self.bucket = bucket
            return
        }
        let parts = suffix.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let recordID = PathNumber.decimal(parts[0]), let generation = PathNumber.decimal(parts[1]),
              parts[2].utf8.count <= 4096 else {
            return nil
        }
        let keyed = parts[2].hasPrefix(Self.keyedPrefix)
        guard let blob = Base64.decodeURLSafe(String(keyed ? parts[2].dropFirst(Self.keyedPrefix.count) : parts[2])) else { return nil }
        let body = Array(blob.dropLast(Self.macSize))
        if keyed {
            guard blob.count == Self.urlKeySize + Self.macSize else { return nil }
        } else {
            guard blob.count > Self.macSize + AESGCMKey.nonceSize + AESGCMKey.tagSize else { return nil }
        }
        let form: Form = keyed ? .keyed(urlKey: body) : .carrying(sealed: body)
        let expected = Self.mac(vault: vault, recordID: recordID, generation: generation, form: form)
        guard Digest.constantTimeEqual(expected, Array(blob.suffix(Self.macSize))) else { return nil }
        self.recordID = recordID
        self.generation = generation
        self.form = form
        self.bucket = nil
    }

    /// A sealed URL for a new subscription: the path suffix, and the seal its
    /// credentials are stored under (the URL key inside it is never stored). With a
    /// `bucket` (a host with a shard map) the `k3.` form, else `k2.`.
    public static func makeSealed(recordID: Int64, generation: Int64, bucket: Int? = nil,
                                  vault: Vault) throws -> (suffix: String, seal: CredentialSeal) {
        precondition(bucket.map { (0..<4096).contains($0) } ?? true, "a bucket is 0..<4096")
        let urlKey = try Digest.randomBytes(urlKeySize)
        let numbers = SealedNumbers.bytes(recordID) + SealedNumbers.bytes(generation) + (bucket.map(SealedNumbers.bytes(bucket:)) ?? [])
        let box = try vault.callbackRouteSealKey.seal(numbers + urlKey, associatedData: bucket == nil ? sealedAssociatedData : bucketAssociatedData)
        return ((bucket == nil ? sealedPrefix : bucketPrefix) + Base64.encodeURLSafe(box),
                try CredentialSeal(vault: vault, recordID: recordID, generation: generation, urlKey: urlKey))
    }

    /// A keyed URL (the form subscriptions were made with on 2026-11-26, record id in
    /// clear; kept for the tests that it is still accepted).
    public static func makeKeyed(recordID: Int64, generation: Int64, vault: Vault) throws -> (suffix: String, seal: CredentialSeal) {
        let urlKey = try Digest.randomBytes(urlKeySize)
        let form = Form.keyed(urlKey: urlKey)
        let blob = urlKey + mac(vault: vault, recordID: recordID, generation: generation, form: form)
        let suffix = "\(recordID)/\(generation)/\(keyedPrefix)\(Base64.encodeURLSafe(blob))"
        return (suffix, try CredentialSeal(vault: vault, recordID: recordID, generation: generation, urlKey: urlKey))
    }

    /// Record id, generation, bucket (`k3.`) and URL key from a sealed suffix (after
    /// `k2.` or `k3.`); nil unless it is exactly one box that opens under this master key.
    private static func openSealed(_ encoded: Substring, withBucket: Bool, vault: Vault) -> (Int64, Int64, Int?, [UInt8])? {
        let numbersSize = withBucket ? 18 : 16
        let boxSize = AESGCMKey.nonceSize + numbersSize + urlKeySize + AESGCMKey.tagSize
        guard encoded.utf8.count <= 128, let box = Base64.decodeURLSafe(String(encoded)), box.count == boxSize,
              let plain = try? vault.callbackRouteSealKey.open(box, associatedData: withBucket ? bucketAssociatedData : sealedAssociatedData),
              plain.count == numbersSize + urlKeySize else { return nil }
        let recordID = SealedNumbers.int64(plain, at: 0)
        let generation = SealedNumbers.int64(plain, at: 8)
        let bucket = withBucket ? SealedNumbers.bucket(plain, at: 16) : nil
        guard recordID >= 0, generation >= 0, !withBucket || bucket != nil else { return nil }
        return (recordID, generation, bucket, Array(plain[numbersSize...]))
    }

    /// Seals `payload` into a carrying URL and returns the path suffix (the form
    /// subscriptions were made with before credentials moved to the database; kept for
    /// the tests of their migration).
    public static func makeCarrying(payload: [UInt8], recordID: Int64, generation: Int64, recordKeyMaterial: [UInt8], vault: Vault) throws -> String {
        let key = try carryingKey(vault: vault, recordID: recordID, recordKeyMaterial: recordKeyMaterial)
        let sealed = try key.seal(payload, associatedData: header(recordID, generation))
        let blob = sealed + mac(vault: vault, recordID: recordID, generation: generation, form: .carrying(sealed: sealed))
        return "\(recordID)/\(generation)/\(Base64.encodeURLSafe(blob))"
    }

    /// The seal of this subscription's stored credentials (keyed URLs only).
    public func credentialSeal(vault: Vault) throws -> CredentialSeal? {
        guard case .keyed(let urlKey) = form else { return nil }
        return try CredentialSeal(vault: vault, recordID: recordID, generation: generation, urlKey: urlKey)
    }

    /// Opens the credentials a carrying URL holds, with the record's key material (its
    /// sealed private key). Nil for a keyed URL.
    public func openCarried(recordKeyMaterial: [UInt8], vault: Vault) throws -> [UInt8]? {
        guard case .carrying(let sealed) = form else { return nil }
        let key = try Self.carryingKey(vault: vault, recordID: recordID, recordKeyMaterial: recordKeyMaterial)
        return try key.open(sealed, associatedData: Self.header(recordID, generation))
    }

    private static func header(_ recordID: Int64, _ generation: Int64) -> [UInt8] {
        Array("ens-callback/1/\(recordID)/\(generation)".utf8)
    }

    private static func mac(vault: Vault, recordID: Int64, generation: Int64, form: Form) -> [UInt8] {
        let message: [UInt8]
        switch form {
        // "/" then the sealed bytes (the original layout); "/k." then the key.
        case .carrying(let sealed): message = header(recordID, generation) + [0x2F] + sealed
        case .keyed(let urlKey): message = header(recordID, generation) + Array("/k.".utf8) + urlKey
        }
        return Array(Digest.hmacSHA256(key: vault.callbackMACKey, message: message).prefix(macSize))
    }

    private static func carryingKey(vault: Vault, recordID: Int64, recordKeyMaterial: [UInt8]) throws -> AESGCMKey {
        try AESGCMKey(bytes: Digest.hmacSHA256(key: vault.callbackSealBase, message: Array("record/\(recordID)/".utf8) + recordKeyMaterial))
    }
}

/// The AES-256-GCM key one subscription's credentials are stored under: derived from
/// the master key and the subscription's URL key, bound to record and generation (key
/// and associated data), so a row cannot be opened with another subscription's URL or
/// moved to another record.
public struct CredentialSeal: Sendable {
    private let key: AESGCMKey
    private let associatedData: [UInt8]

    init(vault: Vault, recordID: Int64, generation: Int64, urlKey: [UInt8]) throws {
        let binding = Array("ens-credentials/1/\(recordID)/\(generation)".utf8)
        key = try AESGCMKey(bytes: Digest.hmacSHA256(key: vault.credentialSealBase, message: binding + [0x2F] + urlKey))
        associatedData = binding
    }

    public func seal(_ credentials: [UInt8]) throws -> [UInt8] {
        try key.seal(credentials, associatedData: associatedData)
    }

    public func open(_ sealed: [UInt8]) throws -> [UInt8] {
        try key.open(sealed, associatedData: associatedData)
    }
}
