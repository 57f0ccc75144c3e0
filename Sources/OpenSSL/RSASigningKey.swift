/// An RSA private key that signs RS256 (RFC 7518 §3.3: RSASSA-PKCS1-v1_5 with SHA-256),
/// for JWTs such as Microsoft Graph client assertions and FCM service-account tokens.
/// Its `EVP_PKEY` is owned by an `EVPKey`.
public final class RSASigningKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation; each signature uses a
    // context of its own.
    private let key: EVPKey

    /// RFC 7518 §3.3: "A key of size 2048 bits or larger MUST be used with these
    /// algorithms."
    public static let minimumBits = 2048

    /// Reads a PEM RSA private key, PKCS#8 (`-----BEGIN PRIVATE KEY-----`, as in a
    /// Google service-account JSON file) or PKCS#1 (`-----BEGIN RSA PRIVATE KEY-----`).
    /// Refuses another key type, an encrypted key, keys under `minimumBits` and a key
    /// whose numbers do not belong together (damaged in a copy).
    public convenience init(pem: String) throws(OpenSSLError) {
        let key = try EVPKey(pem: Array(pem.utf8), operation: "read RSA private key")
        try key.require(.rsa, operation: "read RSA private key")
        guard key.bits >= Self.minimumBits else {
            throw OpenSSLError(operation: "read RSA private key", reasons: ["a \(key.bits)-bit key is shorter than \(Self.minimumBits) bits"])
        }
        try key.requireConsistent(operation: "read RSA private key")
        self.init(key)
    }

    private init(_ key: EVPKey) {
        self.key = key
    }

    /// The modulus size in bits.
    public var bits: Int { key.bits }

    /// The public key as PEM SubjectPublicKeyInfo (what a verifier needs).
    public var publicKeyPEM: String {
        get throws(OpenSSLError) { try key.publicKeyPEM }
    }

    /// The public key as DER SubjectPublicKeyInfo.
    public var publicKeyDER: [UInt8] {
        get throws(OpenSSLError) { try key.publicKeyDER }
    }

    /// RS256 over `message` (for a JWS, the ASCII of `header.payload`): the signature
    /// as JWS carries it before base64url, as long as the modulus (256 bytes for
    /// 2048 bits). Deterministic: one message under one key always signs the same.
    public func signRS256(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        try key.signSHA256(message)
    }
}
