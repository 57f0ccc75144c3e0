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

    static let macSize = 16
    static let sealedPrefix = "r2."
    static let blindPrefix = "b2."
    private static let associatedData = Array("ens-graph-route/2".utf8)
    private static let blindAssociatedData = Array("ens-graph-route/blind/2".utf8)

    public init(recordID: Int64, generation: Int64) {
        self.recordID = recordID
        self.generation = generation
        self.blindID = nil
    }

    /// The URL of the record's rich subscription `blindID`.
    public init(recordID: Int64, blindID: Int64) {
        self.recordID = recordID
        self.generation = 0
        self.blindID = blindID
    }

    /// Reads and authenticates a path suffix; nil for anything forged or malformed.
    public init?(path suffix: String, vault: Vault) {
        if suffix.hasPrefix(Self.blindPrefix) {
            let encoded = suffix.dropFirst(Self.blindPrefix.count)
            guard encoded.utf8.count <= 64, let sealed = Base64.decodeURLSafe(String(encoded)),
                  let plain = try? vault.routingSealKey.open(sealed, associatedData: Self.blindAssociatedData), plain.count == 16 else { return nil }
            let recordID = plain[0..<8].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            let blindID = plain[8..<16].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            guard recordID >= 0, blindID >= 0 else { return nil }
            self.init(recordID: recordID, blindID: blindID)
            return
        }
        if suffix.hasPrefix(Self.sealedPrefix) {
            let encoded = suffix.dropFirst(Self.sealedPrefix.count)
            guard encoded.utf8.count <= 64, let sealed = Base64.decodeURLSafe(String(encoded)),
                  let plain = try? vault.routingSealKey.open(sealed, associatedData: Self.associatedData), plain.count == 16 else { return nil }
            let recordID = plain[0..<8].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            let generation = plain[8..<16].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            guard recordID >= 0, generation >= 0 else { return nil }
            self.init(recordID: recordID, generation: generation)
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
    /// (older) form still routes correctly, it just shows the record id.
    public func path(vault: Vault) -> String {
        precondition(blindID == nil, "a rich subscription's URL is blindPath's")
        let plain = Self.bigEndian(recordID) + Self.bigEndian(generation)
        guard let sealed = try? vault.routingSealKey.seal(plain, associatedData: Self.associatedData) else { return legacyPath(vault: vault) }
        return Self.sealedPrefix + Base64.encodeURLSafe(sealed)
    }

    /// The path suffix of a rich (`blind`) subscription's URL. It has no older form to
    /// fall back on, so a failure to seal (no random bytes) throws, and the subscription
    /// is not made.
    public func blindPath(vault: Vault) throws -> String {
        guard let blindID else { preconditionFailure("blindPath of a record's own subscription") }
        let plain = Self.bigEndian(recordID) + Self.bigEndian(blindID)
        return Self.blindPrefix + Base64.encodeURLSafe(try vault.routingSealKey.seal(plain, associatedData: Self.blindAssociatedData))
    }

    /// The form subscriptions created before 2026-11-25 carry (for tests of that form).
    func legacyPath(vault: Vault) -> String {
        "\(recordID)/\(generation)/\(Base64.encodeURLSafe(Self.mac(vault: vault, recordID: recordID, generation: generation)))"
    }

    private static func mac(vault: Vault, recordID: Int64, generation: Int64) -> [UInt8] {
        Array(Digest.hmacSHA256(key: vault.routingMACKey, message: Array("ens-graph-route/1/\(recordID)/\(generation)".utf8)).prefix(macSize))
    }

    private static func bigEndian(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
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
