internal import ENSHTTP
internal import Codecs
internal import ENSModel
internal import ENSStore
internal import ENSVault
internal import Logging
internal import OpenSSL
internal import MailBackends

/// Every sealed parameter of the device API, with the members its object may carry
/// (docs/api.md, "Sealed values"). One table, so the endpoints and the contract cannot
/// drift apart member by member. Every use is single-use when bound but the check-in's
/// `subscriptionPayload` (`SealedUse.singleUse`); every use that changes a device takes
/// `deviceSecret`, which a device registered with one must present.
extension SealedUse {
    /// The credential members of a `creds` object, at registration and at a check-in.
    static let credentialMembers: Set<String> = [
        "apnsToken", "fcmToken", "ewsUrl", "imapUrl", "oauthAccessToken", "oauthRefresh", "userName", "password", "CBAData", "graphAccessToken",
        "deviceSecret",
    ]
    /// A registration's privacy mode, inside its sealed `creds` so that no one who saw
    /// the request can change it (the `blind` certificate, too large to seal, is named
    /// by its SHA-256).
    static let privacyMembers: Set<String> = ["privacy", "privacyKey", "privacyCertificateSHA256"]

    static let registrationCreds = SealedUse("registerdevicev2.creds", members: credentialMembers.union(privacyMembers), contractForm: true)
    static let checkInCreds = SealedUse("getsubscriptionstatusv2.creds", members: credentialMembers, contractForm: true)
    static let checkIn = SealedUse("getsubscriptionstatusv2.subscriptionPayload",
                                   members: ["pushToken", "lastMessageDate", "ignoreLastMessageDate", "lastNotificationTs"], contractForm: true,
                                   singleUse: false)
    static let unregister = SealedUse("unregister.token", members: ["apnsToken", "fcmToken", "deviceSecret"], contractForm: true,
                                      actingDevice: "apnsToken")
    static let updateDevice = SealedUse("updatedevice.token", members: ["oldApnsToken", "apnsToken", "oldFcmToken", "fcmToken", "deviceSecret"],
                                        contractForm: true, actingDevice: "oldApnsToken")
    static let updateSyncKey = SealedUse("updatesynckey.info", members: ["apnsToken", "fcmToken", "backgroundSyncKey", "syncKeyExpirationTime",
                                                                         "deviceSecret"],
                                         contractForm: true, actingDevice: "apnsToken")
    // ENS's own endpoints: bound always, and proved with the device's secret, never the
    // push token alone (which Apple and Google hold).
    static let updatePrivacy = SealedUse("updateprivacy.info",
        members: ["pushToken", "deviceSecret", "privacy", "privacyKey", "privacyCertificateSHA256"], contractForm: false, actingDevice: "pushToken")
    static let getNotification = SealedUse("getnotification.info", members: ["pushToken", "deviceSecret", "id"], contractForm: false,
                                           actingDevice: "pushToken")
    static let history = SealedUse("getnotificationhistory.info", members: ["pushToken", "deviceSecret", "limit"], contractForm: false,
                                   actingDevice: "pushToken")
    static let markRead = SealedUse("marknotificationsread.info", members: ["pushToken", "deviceSecret", "ids"], contractForm: false,
                                    actingDevice: "pushToken")
}

/// A device's own secret (`deviceSecret`): base64 of 16 to 64 random bytes the device
/// made and keeps, registered inside its sealed `creds`, and presented by the private-
/// notification operations in their sealed `info`.
enum DeviceSecret {
    static let sizes = 16...64

    /// The secret in a sealed object, nil when absent; anything malformed is a
    /// sealed-parameter failure.
    static func sent(in object: [String: JSONValue]) throws(APIError) -> [UInt8]? {
        guard let member = object["deviceSecret"] else { return nil }
        guard let text = member.stringValue, let bytes = Base64.decodeLenient(text), sizes.contains(bytes.count) else {
            throw .sealedParameterRejected
        }
        return bytes
    }

    /// Whether a sealed value may change `device`: any value may change a device that
    /// has no secret (the original contract's clients), and only a bound (so single-
    /// use) value carrying the device's own secret may change one that has. A wrong or
    /// missing secret is logged (by device id) and answered as a sealed-parameter
    /// failure, so the answer says nothing about which it was.
    static func authorise(_ device: DeviceRecord, by value: SealedUse.Checked?, operation: String, context: RequestContext) throws(APIError) {
        guard let stored = device.secretHash else { return }
        guard let value, value.isBound, let secret = try sent(in: value.members),
              Digest.constantTimeEqual(stored, context.services.vault.deviceSecretHash(secret)) else {
            context.logger.warning("device change refused: not sealed with the device's secret",
                                   metadata: ["device": "\(device.id)", "operation": "\(operation)"])
            throw .sealedParameterRejected
        }
    }
}
