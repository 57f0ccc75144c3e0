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
    /// The id the app gave Graph for its encryption certificate: which device key to use.
    public var encryptionCertificateID: String
    /// The certificate's thumbprint, as Graph names it.
    public var encryptionCertificateThumbprint: String
    /// The message id (Graph's immutable id), when the push names it.
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
            guard String(data: plaintext, encoding: .utf8) != nil, JSON.object(plaintext) != nil else { throw Failure.doesNotDecrypt }
            return plaintext
        } catch {
            throw .doesNotDecrypt
        }
    }

    /// The notification's content from the decrypted resource: the sender's name (or
    /// address) and the subject.
    public func content(with key: ENSBlindKey) throws(Failure) -> ENSNotificationContent {
        guard let resource = JSON.object(try open(with: key)) else { throw .doesNotDecrypt }
        let address = (resource["from"] as? [String: Any])?["emailAddress"] as? [String: Any]
        let name = address?["name"] as? String
        let sender = (name?.isEmpty == false ? name : nil) ?? address?["address"] as? String ?? ""
        return ENSNotificationContent(sender: sender, subject: resource["subject"] as? String ?? "")
    }

    /// The push's blind member, parsed in one place so that its wire form can change
    /// without touching anything else: APNs `ens.blind`, an object with `data`,
    /// `dataKey`, `dataSignature`, `encryptionCertificateId`,
    /// `encryptionCertificateThumbprint` and `id` (the message id); FCM `blind`, the same
    /// object as a JSON string (FCM's `data` values are strings).
    static func fromPush(_ value: Any?) -> BlindContent?? {
        guard let value else { return .some(nil) }
        let object: [String: Any]?
        if let text = value as? String {
            object = JSON.object(Data(text.utf8))
        } else {
            object = value as? [String: Any]
        }
        guard let object, let data = object["data"] as? String, let dataKey = object["dataKey"] as? String,
              let signature = object["dataSignature"] as? String, let certificateID = object["encryptionCertificateId"] as? String,
              let thumbprint = object["encryptionCertificateThumbprint"] as? String else { return nil }
        var messageID: String?
        if let id = object["id"] {
            guard let id = id as? String else { return nil }
            messageID = id
        }
        return .some(BlindContent(data: data, dataKey: dataKey, dataSignature: signature, encryptionCertificateID: certificateID,
                                  encryptionCertificateThumbprint: thumbprint, messageID: messageID))
    }
}
