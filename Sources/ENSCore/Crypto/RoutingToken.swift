internal import Codecs
internal import OpenSSL

/// The part of a Graph notification URL after `/graph/`: `<record id>/<generation>/<mac>`,
/// the MAC being 16 bytes of HMAC-SHA-256 (base64url) under a master-derived key over
/// the record id and generation. It carries no credential and nothing secret: it tells
/// the endpoint which record a POST claims to be for, lets a forged or altered URL be
/// dropped before any database work, and keeps record ids from being enumerated. What
/// proves a notification genuine is its clientState (`Vault.graphClientState`).
public struct RoutingToken: Sendable, Equatable {
    public let recordID: Int64
    public let generation: Int64

    static let macSize = 16

    public init(recordID: Int64, generation: Int64) {
        self.recordID = recordID
        self.generation = generation
    }

    /// Reads and authenticates a path suffix; nil for anything forged or malformed.
    public init?(path suffix: String, vault: Vault) {
        let parts = suffix.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, let recordID = PathNumber.decimal(parts[0]), let generation = PathNumber.decimal(parts[1]),
              parts[2].utf8.count <= 64, let mac = Base64.decodeURLSafe(String(parts[2])), mac.count == Self.macSize else { return nil }
        guard Digest.constantTimeEqual(mac, Self.mac(vault: vault, recordID: recordID, generation: generation)) else { return nil }
        self.recordID = recordID
        self.generation = generation
    }

    /// The path suffix for this record and generation.
    public func path(vault: Vault) -> String {
        "\(recordID)/\(generation)/\(Base64.encodeURLSafe(Self.mac(vault: vault, recordID: recordID, generation: generation)))"
    }

    private static func mac(vault: Vault, recordID: Int64, generation: Int64) -> [UInt8] {
        Array(Digest.hmacSHA256(key: vault.routingMACKey, message: Array("ens-graph-route/1/\(recordID)/\(generation)".utf8)).prefix(macSize))
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
