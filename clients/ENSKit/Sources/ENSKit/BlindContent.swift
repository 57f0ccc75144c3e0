public import Foundation
internal import Crypto
internal import CryptoExtras

/// Microsoft Graph's encrypted resource data (rich change notifications), as the blind
/// mode's push carries it: Graph encrypts the message's properties to the device's
/// certificate and ENS relays the ciphertext without being able to read it.
///
/// Opening it (Microsoft's documented scheme): RSA-OAEP (SHA-1) unwraps `dataKey` with
/// the device's private key; HMAC-SHA256 under that key over the base64-decoded `data`
/// must equal `dataSignature`, checked **before** anything is decrypted; then
/// AES-256-CBC with PKCS#7 padding under the key, the IV being the key's first 16
/// bytes, gives the resource's JSON (`subject`, `from`, `receivedDateTime`, ...).
public struct BlindContent: Sendable, Equatable {
    /// Base64 of the AES-CBC ciphertext.
    public var data: String
    /// Base64 of the RSA-OAEP-wrapped symmetric key.
    public var dataKey: String
    /// Base64 of HMAC-SHA256(key, ciphertext).
    public var dataSignature: String
    /// The id ENS gave Graph for the certificate it encrypted to (lowercase hex of the
    /// first 16 bytes of the certificate's SHA-256): which device key to use
    /// (``ENSBlindKey/certificateID``).
    public var encryptionCertificateID: String
    /// The certificate's thumbprint, as Graph names it.
    public var encryptionCertificateThumbprint: String
    /// The message id, when the object names it. ENS's pushes do not (Graph's id is
    /// derived from the mailbox); it is inside the ciphertext (``ENSBlindMessage/id``).
    public var messageID: String?

    public init(data: String, dataKey: String, dataSignature: String, encryptionCertificateID: String,
                encryptionCertificateThumbprint: String, messageID: String? = nil) {
        self.data = data
        self.dataKey = dataKey
        self.dataSignature = dataSignature
        self.encryptionCertificateID = encryptionCertificateID
        self.encryptionCertificateThumbprint = encryptionCertificateThumbprint
        self.messageID = messageID
    }

    /// Why the content did not open. As for `encrypted` previews, the device shows a
    /// generic alert whatever the reason.
    public enum Failure: Error, Sendable, Equatable {
        /// A field is not base64, or the unwrapped key is not an AES-256 key.
        case malformed
        /// The key does not unwrap: another device's key, or an altered `dataKey`.
        case keyDoesNotUnwrap
        /// The signature does not match: `data` was altered, or the key is wrong.
        case signatureMismatch
        /// The ciphertext does not decrypt to UTF-8 JSON.
        case doesNotDecrypt
        /// None of the device's keys has the certificate the content names.
        case noKey
    }

    /// The key among `keys` whose certificate the content was encrypted to.
    public func key(among keys: [ENSBlindKey]) -> ENSBlindKey? {
        let id = encryptionCertificateID.lowercased()
        return keys.first { $0.certificateID == id }
    }

    /// The decrypted message, opened with the one of `keys` whose certificate the
    /// content names (``encryptionCertificateID``): the current key or one a rotation
    /// retired.
    public func message(with keys: [ENSBlindKey]) throws(Failure) -> ENSBlindMessage {
        guard let key = key(among: keys) else { throw .noKey }
        return try message(with: key)
    }

    /// The decrypted message, opened with `key` whatever certificate the content names.
    public func message(with key: ENSBlindKey) throws(Failure) -> ENSBlindMessage {
        let plaintext = try open(with: key)
        guard let message = ENSBlindMessage(resource: plaintext) else { throw .doesNotDecrypt }
        return message
    }

    /// The decrypted resource: Graph's JSON object for the message.
    public func open(with key: ENSBlindKey) throws(Failure) -> Data {
        guard let wrapped = Data(base64Encoded: dataKey), let ciphertext = Data(base64Encoded: data),
              let signature = Data(base64Encoded: dataSignature) else { throw .malformed }
        let keyBytes: Data
        do {
            keyBytes = try key.key.decrypt(wrapped, padding: .PKCS1_OAEP)
        } catch {
            throw .keyDoesNotUnwrap
        }
        guard keyBytes.count == 32 else { throw .malformed }
        let symmetric = SymmetricKey(data: keyBytes)
        // Authenticate first: nothing unauthenticated reaches the CBC decryption, so a
        // padding error can never tell an attacker anything.
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: ciphertext, using: symmetric) else {
            throw .signatureMismatch
        }
        do {
            let iv = try AES._CBC.IV(ivBytes: keyBytes.prefix(16))
            let plaintext = try AES._CBC.decrypt(ciphertext, using: symmetric, iv: iv)
            guard String(data: plaintext, encoding: .utf8) != nil, WireJSON.isObject(plaintext) else { throw Failure.doesNotDecrypt }
            return plaintext
        } catch {
            throw .doesNotDecrypt
        }
    }

    /// The notification's content from the decrypted resource: the sender's name (or
    /// address) and the subject.
    public func content(with key: ENSBlindKey) throws(Failure) -> ENSNotificationContent {
        try message(with: key).content
    }

    /// The push's blind member: APNs `ens.blind`, an object with `data`, `dataKey`,
    /// `dataSignature`, `encryptionCertificateId` and `encryptionCertificateThumbprint`;
    /// FCM `blind`, the same object as a JSON string (FCM's `data` values are strings);
    /// `/getnotification`'s `content` for a push too big to carry it. `.some(nil)`
    /// when `value` is absent, nil when it is malformed.
    static func fromPush(_ value: PushValue?) -> BlindContent?? {
        let data: Data
        switch value {
        case nil, .null?: return .some(nil)
        case .string(let text)?: data = Data(text.utf8)
        case let value?:
            guard let encoded = try? WireJSON.encode(value) else { return nil }
            data = encoded
        }
        guard let body = try? WireJSON.decode(BlindContentBody.self, from: data) else { return nil }
        return .some(body.content)
    }
}

/// A blind push's message, decrypted on the device: what Graph put in the rich
/// notification (`subject`, `from`, `receivedDateTime`, ... and Graph's message `id`).
public struct ENSBlindMessage: Sendable, Equatable {
    /// Graph's message id (to open the message with Graph), when the resource has it.
    public let id: String?
    public let subject: String
    public let senderName: String?
    public let senderAddress: String?
    /// As Graph writes it (ISO 8601, UTC).
    public let receivedDateTime: String?
    /// The decrypted resource: Graph's UTF-8 JSON object.
    public let resource: Data

    /// What the notification shows: the sender's name (or address) and the subject.
    public var content: ENSNotificationContent {
        ENSNotificationContent(sender: (senderName?.isEmpty == false ? senderName : nil) ?? senderAddress ?? "", subject: subject)
    }

    init?(resource: Data) {
        guard let object = try? WireJSON.decode(GraphMessageResource.self, from: resource) else { return nil }
        id = object.id
        subject = object.subject ?? ""
        senderName = object.from?.emailAddress?.name
        senderAddress = object.from?.emailAddress?.address
        receivedDateTime = object.receivedDateTime
        self.resource = resource
    }
}

/// The members of Graph's message resource that a notification shows. Graph's, not
/// ENS's: a member of another type than Graph documents is read as absent, and a
/// message without a subject shows an empty one.
struct GraphMessageResource: Decodable {
    struct From: Decodable {
        let emailAddress: EmailAddress?

        private enum CodingKeys: String, CodingKey { case emailAddress }

        init(from decoder: any Decoder) throws {
            emailAddress = try? decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(EmailAddress.self, forKey: .emailAddress)
        }
    }

    struct EmailAddress: Decodable {
        let name: String?
        let address: String?

        private enum CodingKeys: String, CodingKey { case name, address }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            name = (try? container.decodeIfPresent(String.self, forKey: .name)) ?? nil
            address = (try? container.decodeIfPresent(String.self, forKey: .address)) ?? nil
        }
    }

    let id: String?
    let subject: String?
    let from: From?
    let receivedDateTime: String?

    private enum CodingKeys: String, CodingKey { case id, subject, from, receivedDateTime }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = (try? container.decodeIfPresent(String.self, forKey: .id)) ?? nil
        subject = (try? container.decodeIfPresent(String.self, forKey: .subject)) ?? nil
        from = (try? container.decodeIfPresent(From.self, forKey: .from)) ?? nil
        receivedDateTime = (try? container.decodeIfPresent(String.self, forKey: .receivedDateTime)) ?? nil
    }
}
