public import OpenSSL

/// Fresh credentials for a running subscription, sealed to it.
///
/// Each keyed subscription has a P-256 key pair of its own. The public half is stored
/// in the clear (MailCredentials.box_public_key); the private half is stored only
/// inside the subscription's sealed credentials (`StoredCredentials`), which nothing
/// but a callback (bringing the URL key) opens. So a check-in or a registration can
/// leave new credentials for the subscription (sealed to the public half: `P256Box`
/// with its own `info`, bound to record and generation) without being able to read
/// the current ones, and only the next callback opens them.
public enum CredentialBox {
    static let info = Array("ENS credentials box v1".utf8)

    static func associatedData(recordID: Int64, generation: Int64) -> [UInt8] {
        Array("ens-fresh-credentials/1/\(recordID)/\(generation)".utf8)
    }

    public static func seal(_ credentials: [UInt8], to publicKey: P256PublicKey, recordID: Int64, generation: Int64) throws(OpenSSLError) -> [UInt8] {
        try P256Box.seal(credentials, to: publicKey, info: info, associatedData: associatedData(recordID: recordID, generation: generation))
    }

    /// Nil for a blob that does not open with this subscription's key.
    public static func open(_ blob: [UInt8], with key: P256KeyAgreementKey, recordID: Int64, generation: Int64) -> [UInt8]? {
        P256Box.open(blob, with: key, info: info, associatedData: associatedData(recordID: recordID, generation: generation))
    }
}

/// What a keyed subscription stores under its `CredentialSeal`: the credentials
/// (EWS's `CallbackPayload` encoding) and the private half of its box key.
/// Layout: 0x01, the key's 32-byte private scalar, then the credentials. The key itself
/// is built only when fresh credentials are waiting: building it (a point
/// multiplication and a validity check) would cost every callback more than the rest of
/// opening its credentials.
public struct StoredCredentials: Sendable {
    public let credentials: [UInt8]
    private let boxKeyScalar: [UInt8]

    static let format: UInt8 = 1

    public init(credentials: [UInt8], boxKey: P256KeyAgreementKey) throws(OpenSSLError) {
        self.credentials = credentials
        boxKeyScalar = try boxKey.rawPrivateKey
    }

    /// The same box key with other credentials.
    public func replacingCredentials(with credentials: [UInt8]) -> StoredCredentials {
        StoredCredentials(credentials: credentials, boxKeyScalar: boxKeyScalar)
    }

    private init(credentials: [UInt8], boxKeyScalar: [UInt8]) {
        self.credentials = credentials
        self.boxKeyScalar = boxKeyScalar
    }

    public func boxKey() throws(OpenSSLError) -> P256KeyAgreementKey {
        try P256KeyAgreementKey(rawPrivateKey: boxKeyScalar)
    }

    public var encoded: [UInt8] { [Self.format] + boxKeyScalar + credentials }

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String { "stored credentials: unknown format" }
    }

    public init(encoded bytes: [UInt8]) throws(Invalid) {
        guard bytes.count > 33, bytes[0] == Self.format else { throw Invalid() }
        boxKeyScalar = Array(bytes[1..<33])
        credentials = Array(bytes[33...])
    }
}
