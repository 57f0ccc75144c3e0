internal import ENSModel
internal import ENSVault
internal import OpenSSL
internal import MailBackends

/// Where one sealed parameter may be used (docs/api.md, "Sealed values"). A sealed
/// object names its use in `purpose` ("updateprivacy.info": endpoint and field) and
/// when the device sealed it in `sealedAt` (ms since the epoch); it is refused at any
/// other endpoint or field, outside `sealed.max_age_seconds` of the server's time, and
/// with any member its use does not list. So a sealed value someone saw once (a proxy
/// that terminates TLS, a request log) cannot be replayed as another parameter, nor
/// later than the window.
struct SealedUse: Sendable {
    /// "endpoint.field".
    let purpose: String
    /// The members the object may carry besides `purpose` and `sealedAt`.
    let members: Set<String>
    /// A form the original contract defines, which its clients send without `purpose`
    /// and `sealedAt`: accepted so (unless `sealed.require_purpose`), checked when
    /// present. ENS's own endpoints always require both.
    let contractForm: Bool

    init(_ purpose: String, members: Set<String>, contractForm: Bool) {
        self.purpose = purpose
        self.members = members
        self.contractForm = contractForm
    }

    static let purposeMember = "purpose"
    static let timeMember = "sealedAt"

    /// The members without `purpose` and `sealedAt`, once they passed; every failure
    /// is the same `sealedParameterRejected`.
    func check(_ object: [String: JSONValue], now: Timestamp, maximumAge: Duration, requirePurpose: Bool) throws(APIError) -> [String: JSONValue] {
        var rest = object
        let purpose = rest.removeValue(forKey: Self.purposeMember)
        let sealedAt = rest.removeValue(forKey: Self.timeMember)
        guard rest.keys.allSatisfy(members.contains) else { throw .sealedParameterRejected }
        switch (purpose, sealedAt) {
        case (nil, nil):
            guard contractForm && !requirePurpose else { throw .sealedParameterRejected }
        case (let purpose?, let sealedAt?):
            guard purpose.stringValue == self.purpose, let text = sealedAt.scalarText, let milliseconds = Int64(text) else {
                throw .sealedParameterRejected
            }
            let window = maximumAge.components.seconds * 1000
            guard abs(milliseconds - now.millisecondsSinceEpoch) <= window else { throw .sealedParameterRejected }
        default:
            throw .sealedParameterRejected
        }
        return rest
    }

    /// Whether a bare sealed string (the original contract's /unregister and
    /// /updatedevice token) may be used here: it can name neither use nor time.
    func allowsBareText(requirePurpose: Bool) -> Bool { contractForm && !requirePurpose }
}

/// Opens a sealed parameter with a record's key and parses its plaintext. Every failure
/// becomes `APIError.sealedParameterRejected`, whatever step it happened at.
struct SealedPayload {
    let key: RSAPrivateKey
    /// Ciphertext blocks this parameter may have (`SealedParameter.maximumBlocks` for
    /// `creds`, the small limit for everything else).
    var maximumBlocks = SealedParameter.maximumBlocksSmall
    /// Where this parameter may be used; nil only in tests of the opening itself.
    var use: SealedUse?
    var maximumAge: Duration = .seconds(900)
    var requirePurpose = false

    init(key: RSAPrivateKey, maximumBlocks: Int = SealedParameter.maximumBlocksSmall, use: SealedUse? = nil, settings: DeviceAPISettings? = nil) {
        self.key = key
        self.maximumBlocks = maximumBlocks
        self.use = use
        if let settings {
            maximumAge = settings.sealedMaximumAge
            requirePurpose = settings.sealedRequirePurpose
        }
    }

    /// A sealed JSON object, checked against its use.
    func object(_ sealed: String) throws(APIError) -> [String: JSONValue] {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        // The stand-in plaintext of a failed opening is parsed too, so both paths do
        // the same work; it never parses as an object of the right shape.
        let parsed = try? JSONParser.parse(plaintext)
        guard valid, case .object(let members)? = parsed else { throw .sealedParameterRejected }
        return try checked(members)
    }

    private func checked(_ members: [String: JSONValue]) throws(APIError) -> [String: JSONValue] {
        guard let use else { return members }
        return try use.check(members, now: .now(), maximumAge: maximumAge, requirePurpose: requirePurpose)
    }

    private func bareTextAllowed() throws(APIError) {
        if let use, !use.allowsBareText(requirePurpose: requirePurpose) { throw .sealedParameterRejected }
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
        if case .object(let members)? = parsed { return .object(try checked(members)) }
        guard let text = String.validatedUTF8(plaintext) else { throw .sealedParameterRejected }
        try bareTextAllowed()
        return .text(text.trimmingCharacters(in: " \t\r\n"))
    }

    /// A sealed bare string (the /unregister token).
    func text(_ sealed: String) throws(APIError) -> String {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        let text = String.validatedUTF8(plaintext)
        guard valid, let text else { throw .sealedParameterRejected }
        try bareTextAllowed()
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
