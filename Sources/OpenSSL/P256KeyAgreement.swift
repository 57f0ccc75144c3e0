internal import COpenSSL

/// A P-256 public key for ECDH, checked: on the curve, not the point at infinity.
///
/// Read from the two forms Apple platforms write: the 65-byte uncompressed X9.63 point
/// 0x04 ‖ X ‖ Y (`SecKeyCopyExternalRepresentation`, CryptoKit's `x963Representation`)
/// or the 91-byte DER SubjectPublicKeyInfo (CryptoKit's `derRepresentation`). Either is
/// kept as the 65-byte point. Compressed points (33 bytes) are refused with a reason
/// that says so: devices are told to send one of the two forms (docs/privacy.md).
public struct P256PublicKey: Sendable, Equatable {
    public static let x963Size = 65
    public static let subjectPublicKeyInfoSize = 91

    /// The uncompressed point 0x04 ‖ X ‖ Y.
    public let x963: [UInt8]
    let key: EVPKey

    public init(bytes: [UInt8]) throws(OpenSSLError) {
        let operation = "read P-256 public key"
        let der: [UInt8]
        switch bytes.count {
        case Self.x963Size where bytes[0] == 0x04:
            der = P256DER.subjectPublicKeyInfoPrefix + bytes
        case Self.subjectPublicKeyInfoSize:
            der = bytes
        case 33 where bytes[0] == 0x02 || bytes[0] == 0x03:
            throw OpenSSLError(operation: operation, reasons: ["compressed points are not accepted; send the 65-byte uncompressed point"])
        default:
            throw OpenSSLError(operation: operation, reasons: [
                "expected a 65-byte uncompressed point (0x04 ‖ X ‖ Y) or a 91-byte SubjectPublicKeyInfo",
            ])
        }
        // OpenSSL parses both forms (the point through the fixed P-256 header), so the
        // curve check and the point decoding are its own. Its reason for a point off the
        // curve is a bare "decode error"; ours says what was wrong.
        let key: EVPKey
        do {
            key = try EVPKey(publicKeyDER: der, operation: operation)
        } catch {
            let reason = bytes.count == Self.x963Size ? "not a point on P-256" : "not a SubjectPublicKeyInfo of a P-256 point"
            throw OpenSSLError(operation: operation, reasons: [reason])
        }
        try self.init(key, operation: operation)
    }

    /// The public half of `key`, checked like a received one unless `checked` is false
    /// (a key this process just generated: its point is OpenSSL's own).
    init(_ key: EVPKey, operation: String, checked: Bool = true) throws(OpenSSLError) {
        try key.require(.p256, operation: operation)
        if checked { try key.requireValidPublicKey(operation: operation) }
        // Only the uncompressed form is held; a compressed point cannot reach here (the
        // readers above refuse it, and OpenSSL exports uncompressed by default).
        let point = try key.encodedPublicPoint
        guard point.count == Self.x963Size, point.first == 0x04 else {
            throw OpenSSLError(operation: operation, reasons: ["not an uncompressed P-256 point"])
        }
        x963 = point
        self.key = key
    }

    /// The 91-byte DER SubjectPublicKeyInfo (CryptoKit's `derRepresentation`).
    public var subjectPublicKeyInfo: [UInt8] { P256DER.subjectPublicKeyInfoPrefix + x963 }

    public static func == (lhs: P256PublicKey, rhs: P256PublicKey) -> Bool { lhs.x963 == rhs.x963 }
}

/// A P-256 private key for ECDH (CryptoKit's `P256.KeyAgreement.PrivateKey`); its
/// `EVP_PKEY` is owned by an `EVPKey`.
public final class P256KeyAgreementKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after creation; each derivation uses a
    // context of its own.
    private let key: EVPKey
    public let publicKey: P256PublicKey

    private init(_ key: EVPKey, operation: String, checked: Bool = true) throws(OpenSSLError) {
        self.key = key
        publicKey = try P256PublicKey(key, operation: operation, checked: checked)
    }

    /// A fresh key pair (ENS's ephemeral key for each sealed message). OpenSSL made the
    /// point, so it is not checked again: a check per push would cost as much as the
    /// key agreement.
    public static func generate() throws(OpenSSLError) -> P256KeyAgreementKey {
        try P256KeyAgreementKey(EVPKey.generateP256(), operation: "generate P-256 key", checked: false)
    }

    /// Reads a PEM private key (PKCS#8 or SEC 1). Refuses anything but a valid P-256 key.
    public convenience init(pem: String) throws(OpenSSLError) {
        let operation = "read P-256 private key"
        let key = try EVPKey(pem: Array(pem.utf8), operation: operation)
        try key.require(.p256, operation: operation)
        try key.requireValidKeyPair(operation: operation)
        try self.init(key, operation: operation)
    }

    /// The private scalar as 32 big-endian bytes (CryptoKit's `rawRepresentation`, what
    /// test vectors write). Refuses 0 and values ≥ the group order.
    public convenience init(rawPrivateKey scalar: [UInt8]) throws(OpenSSLError) {
        let operation = "read P-256 private scalar"
        guard scalar.count == 32 else { throw OpenSSLError(operation: operation, reasons: ["expected 32 bytes"]) }
        // Wrapped as PKCS#8 without the public point, which OpenSSL then computes.
        let key = try EVPKey(der: P256DER.privateKeyInfoPrefix + scalar, operation: operation)
        try key.require(.p256, operation: operation)
        try key.requireValidKeyPair(operation: operation)
        try self.init(key, operation: operation)
    }

    /// The private scalar as 32 big-endian bytes: what `init(rawPrivateKey:)` reads.
    public var rawPrivateKey: [UInt8] {
        get throws(OpenSSLError) { try key.privateScalar(length: 32) }
    }

    /// The private key as PKCS#8 PEM.
    public var pem: String {
        get throws(OpenSSLError) { try key.pkcs8PEM }
    }

    /// Z, the raw ECDH shared secret with `peer`: the 32-byte x-coordinate of the shared
    /// point (CryptoKit's `sharedSecretFromKeyAgreement`). Not a key: derive one with HKDF.
    public func sharedSecret(with peer: P256PublicKey) throws(OpenSSLError) -> [UInt8] {
        try key.deriveSharedSecret(with: peer.key)
    }
}

/// The fixed DER framing of P-256 keys (id-ecPublicKey with the named curve prime256v1),
/// so that the raw forms devices and test vectors use go through OpenSSL's own readers.
enum P256DER {
    /// SubjectPublicKeyInfo up to the BIT STRING's contents: SEQUENCE { SEQUENCE {
    /// id-ecPublicKey, prime256v1 }, BIT STRING (66 bytes, no unused bits) }; the
    /// 65-byte point follows.
    static let subjectPublicKeyInfoPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,
        0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]

    /// PKCS#8 PrivateKeyInfo { 0, { id-ecPublicKey, prime256v1 }, OCTET STRING {
    /// ECPrivateKey { 1, OCTET STRING (32 bytes) } } } up to the scalar; the 32-byte
    /// scalar follows. The optional public key is left out.
    static let privateKeyInfoPrefix: [UInt8] = [
        0x30, 0x41, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,
        0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x04, 0x27, 0x30, 0x25, 0x02, 0x01,
        0x01, 0x04, 0x20,
    ]
}
