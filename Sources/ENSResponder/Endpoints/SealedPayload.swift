internal import ENSHTTP
internal import ENSConfig
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import Logging
internal import OpenSSL
internal import MailBackends

/// Where one sealed parameter may be used (docs/api.md, "Sealed values"). A sealed
/// object names its use in `purpose` ("updateprivacy.info": endpoint and field) and
/// when the device sealed it in `sealedAt` (ms since the epoch); it is refused at any
/// other endpoint or field, older than `sealed.max_age_seconds`, more than
/// `futureSkew` ahead of the server's clock, and with any member its use does not list.
/// A bound value of a state-changing use is also accepted once only (`SealedOnce`). So
/// a sealed value someone saw once (a proxy that terminates TLS, a request log) cannot
/// be replayed as another parameter, nor at its own, nor later than the window.
struct SealedUse: Sendable {
    /// "endpoint.field".
    let purpose: String
    /// The members the object may carry besides `purpose` and `sealedAt`.
    let members: Set<String>
    /// A form the original contract defines, which its clients send without `purpose`
    /// and `sealedAt`: accepted so (unless `sealed.require_purpose`), checked when
    /// present. ENS's own endpoints always require both.
    let contractForm: Bool
    /// Whether a bound value of this use is accepted once only. Every use that changes
    /// a device, a subscription or a notification's state is; only the check-in's
    /// `subscriptionPayload` is not (it records liveness, which a replay inside the
    /// window cannot move further than the device itself did).
    let singleUse: Bool
    /// The member naming the device a single-use value acts on (`sealedToken`), part of
    /// its mark, so two devices of one user sealing in the same millisecond do not spend
    /// each other's values. nil for a registration's or a check-in's `creds`: the device
    /// they name may be new, so naming another one must not make a value fresh again.
    let actingDevice: String?

    init(_ purpose: String, members: Set<String>, contractForm: Bool, singleUse: Bool = true, actingDevice: String? = nil) {
        self.purpose = purpose
        self.members = members
        self.contractForm = contractForm
        self.singleUse = singleUse
        self.actingDevice = actingDevice
    }

    static let purposeMember = "purpose"
    static let timeMember = "sealedAt"
    /// How far ahead of the server's clock a `sealedAt` may be: a device's clock that
    /// runs a little fast, not a value sealed now for use an hour from now.
    static let futureSkew: Int64 = 60_000

    /// A sealed object that passed its use's checks.
    struct Checked {
        /// The members without `purpose` and `sealedAt`.
        let members: [String: JSONValue]
        /// `sealedAt`, when the object was bound (named its use and time).
        let sealedAt: Int64?
        var isBound: Bool { sealedAt != nil }
    }

    /// The object once it passed; every failure is the same `sealedParameterRejected`.
    func check(_ object: [String: JSONValue], now: Timestamp, maximumAge: Duration, requirePurpose: Bool) throws(APIError) -> Checked {
        var rest = object
        let purpose = rest.removeValue(forKey: Self.purposeMember)
        let sealedAt = rest.removeValue(forKey: Self.timeMember)
        guard rest.keys.allSatisfy(members.contains) else { throw .sealedParameterRejected }
        switch (purpose, sealedAt) {
        case (nil, nil):
            guard contractForm && !requirePurpose else { throw .sealedParameterRejected }
            return Checked(members: rest, sealedAt: nil)
        case (let purpose?, let sealedAt?):
            guard purpose.stringValue == self.purpose, let text = sealedAt.scalarText, let milliseconds = Int64(text) else {
                throw .sealedParameterRejected
            }
            let age = now.millisecondsSinceEpoch - milliseconds
            guard age <= maximumAge.components.seconds * 1000, age >= -Self.futureSkew else { throw .sealedParameterRejected }
            return Checked(members: rest, sealedAt: milliseconds)
        default:
            throw .sealedParameterRejected
        }
    }

    /// Whether a bare sealed string (the original contract's /unregister and
    /// /updatedevice token) may be used here: it can name neither use nor time.
    func allowsBareText(requirePurpose: Bool) -> Bool { contractForm && !requirePurpose }
}

/// Marks bound sealed values of single-use uses as used, in the user's shard
/// (`SealedValuesUsed`), before the operation they carry runs. A value already marked
/// is a sealed-parameter failure like any other; a database that cannot take the mark
/// is a 503 (the value stays unused: the device may send it again).
struct SealedOnce {
    let recordID: Int64
    let vault: Vault
    let register: SealedValuesUsed
    let logger: Logger

    /// Marks a value spent. An envelope opens only whole, so its plaintext is the act it
    /// asks for, and the plaintext's digest is its mark. A chunked value's blocks are
    /// sealed one by one under a public key: anyone can add a block of whitespace to a
    /// logged one, or splice blocks of their own around the original ones, and get new
    /// bytes that parse to the same request at the same `sealedAt`. So a chunked value
    /// is marked by its act (use, record, `sealedAt`, the device it acts on) too. (A
    /// block of theirs that carries a `sealedAt` of its own is another act:
    /// docs/security.md, "Open items".) The plaintext's digest is the mark 0.5.0 hosts
    /// check, so a value spent on either release is spent on both during an upgrade.
    func claim(_ use: SealedUse, _ value: SealedUse.Checked, plaintext: [UInt8], whole: Bool, sealedAt: Int64,
               maximumAge: Duration) throws(APIError) {
        var marks = [vault.sealedValueDigest(purpose: use.purpose, recordID: recordID, plaintext: plaintext)]
        if !whole {
            // A member that does not name a device fails its endpoint later; its mark is
            // made with no device, the value spent all the same.
            let device = use.actingDevice.flatMap { try? value.members.sealedToken($0).storedForm } ?? ""
            marks.append(vault.sealedActDigest(purpose: use.purpose, recordID: recordID, sealedAt: sealedAt, device: device))
        }
        // Past this it fails its window anyway (sealedAt + the age allowed).
        let expiresAt = Timestamp(millisecondsSinceEpoch: sealedAt + maximumAge.components.seconds * 1000 + 1000)
        let fresh: Bool
        do {
            fresh = try register.claim(marks: marks, expiresAt: expiresAt)
        } catch {
            logger.error("cannot mark a sealed value used", metadata: ["error": "\(error)"])
            throw .serviceUnavailable
        }
        guard fresh else {
            logger.warning("sealed value refused: used before", metadata: ["purpose": "\(use.purpose)", "record": "\(recordID)"])
            throw .sealedParameterRejected
        }
    }
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
    /// Where a single-use value is marked used; nil only in tests of the opening itself.
    var once: SealedOnce?

    init(key: RSAPrivateKey, maximumBlocks: Int = SealedParameter.maximumBlocksSmall, use: SealedUse? = nil, settings: DeviceAPISettings? = nil,
         once: SealedOnce? = nil) {
        self.key = key
        self.maximumBlocks = maximumBlocks
        self.use = use
        self.once = once
        if let settings {
            maximumAge = settings.sealedMaximumAge
            requirePurpose = settings.sealedRequirePurpose
        }
    }

    /// A sealed JSON object, checked against its use.
    func object(_ sealed: String) throws(APIError) -> [String: JSONValue] { try opened(sealed).members }

    /// A sealed JSON object, checked against its use (and, bound and single-use,
    /// marked used), with whether it was bound.
    func opened(_ sealed: String) throws(APIError) -> SealedUse.Checked {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        // The stand-in plaintext of a failed opening is parsed too, so both paths do
        // the same work; it never parses as an object of the right shape.
        let parsed = try? JSONParser.parse(plaintext)
        guard valid, case .object(let members)? = parsed else { throw .sealedParameterRejected }
        return try checked(members, plaintext: plaintext, whole: SealedParameter.isEnvelope(sealed))
    }

    /// `whole`: an envelope, whose plaintext opened as one piece.
    private func checked(_ members: [String: JSONValue], plaintext: [UInt8], whole: Bool) throws(APIError) -> SealedUse.Checked {
        guard let use else { return SealedUse.Checked(members: members, sealedAt: nil) }
        let checked = try use.check(members, now: .now(), maximumAge: maximumAge, requirePurpose: requirePurpose)
        if use.singleUse, let sealedAt = checked.sealedAt {
            // Every state-changing opening passes here: a use cannot forget its mark.
            guard let once else { preconditionFailure("a single-use sealed value (\(use.purpose)) opened without a register to mark it in") }
            try once.claim(use, checked, plaintext: plaintext, whole: whole, sealedAt: sealedAt, maximumAge: maximumAge)
        }
        return checked
    }

    private func bareTextAllowed() throws(APIError) {
        if let use, !use.allowsBareText(requirePurpose: requirePurpose) { throw .sealedParameterRejected }
    }

    /// What a sealed parameter that may be either form holds (/updatedevice's token).
    enum Plaintext {
        case object(SealedUse.Checked)
        case text(String)
    }

    /// A sealed JSON object or, failing that, a bare string: one opening and one parse
    /// either way, so the two forms cost the same.
    func objectOrText(_ sealed: String) throws(APIError) -> Plaintext {
        let (plaintext, valid) = SealedParameter.open(sealed, with: key, maximumBlocks: maximumBlocks)
        let parsed = try? JSONParser.parse(plaintext)
        guard valid else { throw .sealedParameterRejected }
        if case .object(let members)? = parsed {
            return .object(try checked(members, plaintext: plaintext, whole: SealedParameter.isEnvelope(sealed)))
        }
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
