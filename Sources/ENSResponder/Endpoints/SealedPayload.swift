internal import ENSCore
internal import OpenSSL

/// Opens a sealed parameter with a record's key and parses its plaintext. Every failure
/// becomes `APIError.sealedParameterRejected`, whatever step it happened at.
struct SealedPayload {
    let key: RSAPrivateKey
    /// Ciphertext blocks this parameter may have (`SealedParameter.maximumBlocks` for
    /// `creds`, the small limit for everything else).
    var maximumBlocks = SealedParameter.maximumBlocksSmall

    /// A sealed JSON object.
    func object(_ sealed: String) throws(APIError) -> [String: JSONValue] {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        // The stand-in plaintext of a failed opening is parsed too, so both paths do
        // the same work; it never parses as an object of the right shape.
        let parsed = try? JSONParser.parse(plaintext)
        guard valid, case .object(let members)? = parsed else { throw .sealedParameterRejected }
        return members
    }

    /// What a sealed parameter that may be either form holds (/updatedevice's token).
    enum Plaintext {
        case object([String: JSONValue])
        case text(String)
    }

    /// A sealed JSON object or, failing that, a bare string: one opening and one parse
    /// either way, so the two forms cost the same.
    func objectOrText(_ sealed: String) throws(APIError) -> Plaintext {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        let parsed = try? JSONParser.parse(plaintext)
        guard valid else { throw .sealedParameterRejected }
        if case .object(let members)? = parsed { return .object(members) }
        guard let text = String(validating: plaintext, as: UTF8.self) else { throw .sealedParameterRejected }
        return .text(text.trimmingCharacters(in: " \t\r\n"))
    }

    /// A sealed bare string (the /unregister token).
    func text(_ sealed: String) throws(APIError) -> String {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        let text = String(validating: plaintext, as: UTF8.self)
        guard valid, let text else { throw .sealedParameterRejected }
        return text.trimmingCharacters(in: " \t\r\n")
    }
}

extension [String: JSONValue] {
    /// A required string member of a sealed object.
    func sealedString(_ name: String) throws(APIError) -> String {
        guard let value = self[name]?.stringValue, !value.isEmpty else { throw .sealedParameterRejected }
        return value
    }

    /// A device token: the member `name` (an APNs token, or `fcm:<token>`), or, for an
    /// `apnsToken`-style name, its FCM twin (`fcmToken`, `oldFcmToken`) holding an FCM
    /// registration token. Exactly one of the two.
    func sealedToken(_ name: String) throws(APIError) -> DeviceToken {
        let fcmName = name.replacingApnsWithFcm
        let given = self[name]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let givenFCM = fcmName == name ? nil : self[fcmName]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        switch (given, givenFCM) {
        case (let text?, nil):
            guard let token = DeviceToken(sent: text) else { throw .sealedParameterRejected }
            return token
        case (nil, let text?):
            guard let token = DeviceToken(fcm: text) else { throw .sealedParameterRejected }
            return token
        default:
            throw .sealedParameterRejected
        }
    }

    func sealedTimestamp(_ name: String) throws(APIError) -> Timestamp {
        guard let timestamp = Timestamp(apiString: try sealedString(name)) else { throw .sealedParameterRejected }
        return timestamp
    }

    func sealedFlag(_ name: String) throws(APIError) -> Bool {
        guard let member = self[name] else { return false }
        switch member.scalarText {
        case "1", "true": return true
        case "0", "false": return false
        default: throw .sealedParameterRejected
        }
    }
}

private extension String {
    /// `apnsToken` → `fcmToken`, `oldApnsToken` → `oldFcmToken`; other names unchanged.
    var replacingApnsWithFcm: String {
        if self == "apnsToken" { return "fcmToken" }
        if self == "oldApnsToken" { return "oldFcmToken" }
        return self
    }
}
