public import Foundation
internal import Crypto
internal import CryptoExtras
internal import SwiftASN1
internal import X509

/// The device's P-256 key-agreement key for the `encrypted` mode: ENS seals each
/// preview to its public half (docs/privacy.md, "Encrypted previews"). ``ENSClient``
/// makes one per user at the first registration that asks for `encrypted`, keeps it in
/// its ``ENSKeyStore`` and sends the public half as `privacyKey`.
public struct ENSPreviewKey: Sendable {
    let key: P256.KeyAgreement.PrivateKey

    /// A new random key.
    public init() { key = P256.KeyAgreement.PrivateKey() }

    /// The key from its 32-byte raw scalar (``rawRepresentation``).
    public init(rawRepresentation: Data) throws(ENSError) {
        do {
            key = try P256.KeyAgreement.PrivateKey(rawRepresentation: rawRepresentation)
        } catch {
            throw .invalidArgument("not a P-256 private key")
        }
    }

    /// The private scalar: what the key store keeps. A secret.
    public var rawRepresentation: Data { key.rawRepresentation }

    /// The 65-byte uncompressed public point (`0x04 ‖ X ‖ Y`), as ENS keeps it.
    public var publicKeyX963: Data { key.publicKey.x963Representation }
}

/// The device's RSA key for Microsoft Graph's encrypted rich notifications (the blind
/// mode), with the self-signed X.509 certificate that carries its public half: ENS gives
/// Graph the certificate, Graph wraps each notification's symmetric key to it with
/// RSA-OAEP (SHA-1); see ``BlindContent``.
///
/// ENS names the certificate to Graph by ``certificateID`` (the first 16 bytes of the
/// SHA-256 of its DER, lowercase hex), and each push names the certificate it was
/// encrypted to by that id (`encryptionCertificateId`): that is how a device with a
/// previous key (after a rotation) picks the right one.
public struct ENSBlindKey: Sendable, Equatable {
    /// The private key as DER (PKCS#1): swift-crypto's RSA key types are not Sendable. A secret.
    public let derRepresentation: Data
    /// The certificate's DER form: what `privacyCertificate` sends (base64).
    public let certificateDER: Data
    /// `encryptionCertificateId`: lowercase hex of the first 16 bytes of SHA-256(certificate DER).
    public let certificateID: String
    /// `encryptionCertificateThumbprint`: uppercase hex SHA-1 of the certificate's DER.
    public let certificateThumbprint: String
    /// Lowercase hex SHA-256 of the certificate's DER (`privacyCertificateSHA256` of
    /// `/updateprivacy`).
    public let certificateSHA256: String
    /// When the certificate stops being valid. ENS refuses one that expires within a day.
    public let notValidAfter: Date
    /// The modulus length.
    public let bits: Int

    /// How long a certificate ENSKit makes is valid: two years.
    public static let defaultValidity: Duration = .seconds(2 * 365 * 86_400)

    var key: _RSA.Encryption.PrivateKey {
        get throws { try _RSA.Encryption.PrivateKey(derRepresentation: derRepresentation) }
    }

    /// A new RSA key of `bits` (2048, 3072 or 4096: what Graph takes) and a self-signed
    /// certificate for it, valid from five minutes before `now` for `validity`.
    public init(bits: Int = 2048, validity: Duration = ENSBlindKey.defaultValidity, now: Date = Date()) throws(ENSError) {
        guard [2048, 3072, 4096].contains(bits) else { throw .invalidArgument("a blind key has 2048, 3072 or 4096 bits") }
        guard validity > .seconds(86_400) else { throw .invalidArgument("a blind certificate must be valid for more than a day") }
        let signing: _RSA.Signing.PrivateKey
        do {
            signing = try _RSA.Signing.PrivateKey(keySize: .init(bitCount: bits))
        } catch {
            throw .invalidArgument("cannot make an RSA key of \(bits) bits")
        }
        try self.init(signing: signing, certificateDER: try Self.selfSigned(signing, now: now, validity: validity))
    }

    /// A key from PKCS#8 or PKCS#1 PEM, with its certificate (DER); without one, ENSKit
    /// makes a self-signed certificate for it now.
    public init(pemRepresentation: String, certificateDER: Data? = nil) throws(ENSError) {
        let signing: _RSA.Signing.PrivateKey
        do {
            signing = try _RSA.Signing.PrivateKey(pemRepresentation: pemRepresentation)
        } catch {
            throw .invalidArgument("not an RSA private key of 2048 bits or more")
        }
        try self.init(signing: signing, certificateDER: certificateDER)
    }

    /// A key from DER (``derRepresentation``), with its certificate (DER); without one,
    /// ENSKit makes a self-signed certificate for it now.
    public init(derRepresentation: Data, certificateDER: Data? = nil) throws(ENSError) {
        let signing: _RSA.Signing.PrivateKey
        do {
            signing = try _RSA.Signing.PrivateKey(derRepresentation: derRepresentation)
        } catch {
            throw .invalidArgument("not an RSA private key of 2048 bits or more")
        }
        try self.init(signing: signing, certificateDER: certificateDER)
    }

    private init(signing: _RSA.Signing.PrivateKey, certificateDER given: Data?) throws(ENSError) {
        let certificateDER: Data
        if let given {
            certificateDER = given
        } else {
            certificateDER = try Self.selfSigned(signing, now: Date(), validity: Self.defaultValidity)
        }
        let certificate: Certificate
        do {
            certificate = try Certificate(derEncoded: Array(certificateDER))
        } catch {
            throw .invalidArgument("not an X.509 certificate (DER)")
        }
        guard certificate.publicKey == Certificate.PrivateKey(signing).publicKey else {
            throw .invalidArgument("the certificate is not the key's")
        }
        derRepresentation = signing.derRepresentation
        self.certificateDER = certificateDER
        let sha256 = Array(SHA256.hash(data: certificateDER))
        certificateID = Hex.encode(sha256.prefix(16))
        certificateSHA256 = Hex.encode(sha256)
        certificateThumbprint = Hex.encode(Array(Insecure.SHA1.hash(data: certificateDER))).uppercased()
        notValidAfter = certificate.notValidAfter
        bits = signing.keySizeInBits
    }

    /// A self-signed certificate (CN=ENS device, an end entity) for `key`.
    static func selfSigned(_ key: _RSA.Signing.PrivateKey, now: Date, validity: Duration) throws(ENSError) -> Data {
        do {
            let privateKey = Certificate.PrivateKey(key)
            let name = try DistinguishedName { CommonName("ENS device") }
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: privateKey.publicKey,
                notValidBefore: now.addingTimeInterval(-300), notValidAfter: now.addingTimeInterval(TimeInterval(validity.components.seconds)),
                issuer: name, subject: name, signatureAlgorithm: .sha256WithRSAEncryption,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true, keyEncipherment: true, dataEncipherment: true))
                },
                issuerPrivateKey: privateKey)
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return Data(serializer.serializedBytes)
        } catch {
            throw .invalidArgument("cannot make a certificate for the key")
        }
    }

    /// The certificate as `privacyCertificate` sends it: base64 of its DER form.
    public var certificateBase64: String { certificateDER.base64EncodedString() }
    /// The certificate as PEM.
    public var certificatePEM: String {
        "-----BEGIN CERTIFICATE-----\n" + certificateDER.base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
            + "\n-----END CERTIFICATE-----\n"
    }
    /// The private key as PEM. A secret.
    public var pemRepresentation: String { (try? key.pemRepresentation) ?? "" }
    /// The public half as a PEM `PUBLIC KEY`.
    public var publicKeyPEM: String { (try? key.publicKey.pemRepresentation) ?? "" }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.derRepresentation == rhs.derRepresentation && lhs.certificateDER == rhs.certificateDER
    }
}

/// What the key store keeps for the blind mode (item `blind-key`): the current key and
/// the previous ones, each with its certificate. After a rotation Graph may still
/// encrypt to the old certificate until the subscription's next renewal (about 12
/// hours), so a previous key is kept for ``ENSBlindKeyRing/retention`` after it retired.
struct ENSBlindKeyRing {
    var current: ENSBlindKey?
    var previous: [(key: ENSBlindKey, retiredAt: Date)] = []

    /// How long a retired key is kept: three days, well past the subscription's next
    /// renewal.
    static let retention: TimeInterval = 3 * 86_400
    /// At most this many retired keys (ENS keeps at most 8 certificates per mailbox).
    static let maximumPrevious = 8

    /// Current first, then the previous ones, newest retired first.
    var all: [ENSBlindKey] { (current.map { [$0] } ?? []) + previous.map(\.key) }

    func key(certificateID: String) -> ENSBlindKey? {
        all.first { $0.certificateID == certificateID.lowercased() }
    }

    /// Makes `key` current; the one it replaces is kept as a previous key.
    mutating func install(_ key: ENSBlindKey, now: Date) {
        previous.removeAll { $0.key.certificateID == key.certificateID }
        if let current, current.certificateID != key.certificateID { retire(current, now: now) }
        current = key
        prune(now: now)
    }

    /// Keeps `key` as a previous key (a rotation's new key, until ENS took it).
    mutating func retire(_ key: ENSBlindKey, now: Date) {
        previous.removeAll { $0.key.certificateID == key.certificateID }
        previous.insert((key, now), at: 0)
        prune(now: now)
    }

    mutating func remove(certificateID: String) {
        previous.removeAll { $0.key.certificateID == certificateID }
    }

    mutating func prune(now: Date) {
        previous.removeAll { now.timeIntervalSince($0.retiredAt) > Self.retention }
        if previous.count > Self.maximumPrevious { previous.removeLast(previous.count - Self.maximumPrevious) }
    }

    init(current: ENSBlindKey? = nil) { self.current = current }

    /// `{"current": {"key", "certificate"}, "previous": [{"key", "certificate", "retiredAt"}]}`
    /// (base64 DER; `retiredAt` in milliseconds). An item of ENSKit before certificates (a
    /// bare DER key) is read as the current key with a new certificate.
    init(data: Data) throws(ENSError) {
        guard WireJSON.isObject(data) else {
            current = try ENSBlindKey(derRepresentation: data)
            return
        }
        let item: Item
        do {
            item = try WireJSON.decode(Item.self, from: data)
        } catch {
            throw .keyStore(ENSKeyStoreError("the blind key item is malformed: \(error)"))
        }
        func key(_ entry: Item.Entry) throws(ENSError) -> ENSBlindKey {
            guard let key = Data(base64Encoded: entry.key), let certificate = Data(base64Encoded: entry.certificate) else {
                throw .keyStore(ENSKeyStoreError("the blind key item is malformed: not base64"))
            }
            return try ENSBlindKey(derRepresentation: key, certificateDER: certificate)
        }
        if let entry = item.current { current = try key(entry) }
        for entry in item.previous ?? [] {
            guard let retired = entry.retiredAt else { throw .keyStore(ENSKeyStoreError("the blind key item is malformed: 'retiredAt' is missing")) }
            previous.append((try key(entry), Date(timeIntervalSince1970: Double(retired.value) / 1000)))
        }
    }

    func data() throws(ENSError) -> Data {
        func entry(_ key: ENSBlindKey, retiredAt: Date? = nil) -> Item.Entry {
            Item.Entry(key: key.derRepresentation.base64EncodedString(), certificate: key.certificateDER.base64EncodedString(),
                       retiredAt: retiredAt.map { JSONInteger(Int64($0.timeIntervalSince1970 * 1000)) })
        }
        return try WireJSON.encode(Item(current: current.map { entry($0) }, previous: previous.map { entry($0.key, retiredAt: $0.retiredAt) }))
    }

    /// The item as the key store keeps it.
    struct Item: Codable {
        struct Entry: Codable {
            /// Base64 of the key's DER form.
            let key: String
            /// Base64 of the certificate's DER form.
            let certificate: String
            /// Milliseconds since the epoch; previous keys only.
            let retiredAt: JSONInteger?
        }

        let current: Entry?
        /// Always written (an empty list when there are none).
        let previous: [Entry]?

        private enum CodingKeys: String, CodingKey { case current, previous }

        init(current: Entry?, previous: [Entry]) {
            self.current = current
            self.previous = previous
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            current = try container.decodeIfPresent(Entry.self, forKey: .current)
            previous = try container.decodeIfPresent([Entry].self, forKey: .previous)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(current, forKey: .current)
            try container.encode(previous ?? [], forKey: .previous)
        }
    }
}
