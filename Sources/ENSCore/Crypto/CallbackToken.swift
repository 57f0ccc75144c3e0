internal import Codecs
public import OpenSSL

/// The part of an Exchange callback URL after `/ews/`: `<record id>/<generation>/<blob>`,
/// in one of two forms.
///
/// **Keyed** (what registrations make now): the blob is `k.` followed by base64url of
/// `key ‖ mac`. `key` is 32 random bytes made for this subscription; the credentials
/// themselves are in the database (table MailCredentials), sealed under a key derived
/// from the master key *and* `key` (`CredentialSeal`). The URL alone opens nothing, and
/// neither does the database, with or without the master key: a callback brings the one
/// part the database never holds. The URL stays short whatever the credentials weigh.
///
/// **Carrying** (subscriptions made before): the blob is `sealed ‖ mac`, the
/// credentials sealed in the URL itself under a key derived from the master key and the
/// record's own sealed key material. Still accepted, so those subscriptions keep
/// working until they are renewed.
///
/// Either way `mac` is 16 bytes of HMAC-SHA-256 under a master-derived key over the
/// record id, generation and the rest of the blob: a forged, truncated or altered URL is
/// refused (HTTP 4xx) before any database work. Record id and generation travel in
/// clear (they are not secret) and are bound by the MAC and the seal's associated data.
public struct CallbackToken: Sendable, Equatable {
    public let recordID: Int64
    public let generation: Int64
    public let form: Form

    public enum Form: Sendable, Equatable {
        /// The key that, with the master key, opens this subscription's stored credentials.
        case keyed(urlKey: [UInt8])
        /// The credentials themselves, sealed (subscriptions made before the keyed form).
        case carrying(sealed: [UInt8])
    }

    static let macSize = 16
    public static let urlKeySize = 32
    private static let keyedPrefix = "k."

    /// Reads and authenticates the path suffix. Nil for anything forged or malformed.
    public init?(path suffix: String, vault: Vault) {
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
    }

    /// A keyed URL for a new subscription: the path suffix, and the seal its credentials
    /// are stored under (the URL key inside it is never stored).
    public static func makeKeyed(recordID: Int64, generation: Int64, vault: Vault) throws -> (suffix: String, seal: CredentialSeal) {
        let urlKey = try Digest.randomBytes(urlKeySize)
        let form = Form.keyed(urlKey: urlKey)
        let blob = urlKey + mac(vault: vault, recordID: recordID, generation: generation, form: form)
        let suffix = "\(recordID)/\(generation)/\(keyedPrefix)\(Base64.encodeURLSafe(blob))"
        return (suffix, try CredentialSeal(vault: vault, recordID: recordID, generation: generation, urlKey: urlKey))
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
