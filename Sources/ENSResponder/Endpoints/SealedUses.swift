internal import Codecs
internal import ENSModel
internal import MailBackends

/// Every sealed parameter of the device API, with the members its object may carry
/// (docs/api.md, "Sealed values"). One table, so the endpoints and the contract cannot
/// drift apart member by member.
extension SealedUse {
    /// The credential members of a `creds` object, at registration and at a check-in.
    static let credentialMembers: Set<String> = [
        "apnsToken", "fcmToken", "ewsUrl", "oauthAccessToken", "oauthRefresh", "userName", "password", "CBAData", "graphAccessToken",
        "deviceSecret",
    ]

    static let registrationCreds = SealedUse("registerdevicev2.creds", members: credentialMembers, contractForm: true)
    static let checkInCreds = SealedUse("getsubscriptionstatusv2.creds", members: credentialMembers, contractForm: true)
    static let checkIn = SealedUse("getsubscriptionstatusv2.subscriptionPayload",
                                   members: ["pushToken", "lastMessageDate", "ignoreLastMessageDate", "lastNotificationTs"], contractForm: true)
    static let unregister = SealedUse("unregister.token", members: ["apnsToken", "fcmToken"], contractForm: true)
    static let updateDevice = SealedUse("updatedevice.token", members: ["oldApnsToken", "apnsToken", "oldFcmToken", "fcmToken"], contractForm: true)
    static let updateSyncKey = SealedUse("updatesynckey.info", members: ["apnsToken", "fcmToken", "backgroundSyncKey", "syncKeyExpirationTime"],
                                         contractForm: true)
    // ENS's own endpoints: bound always, and proved with the device's secret, never the
    // push token alone (which Apple and Google hold).
    static let updatePrivacy = SealedUse("updateprivacy.info", members: ["pushToken", "deviceSecret", "privacy", "privacyKey", "privacyCertificateSHA256"], contractForm: false)
    static let getNotification = SealedUse("getnotification.info", members: ["pushToken", "deviceSecret", "id"], contractForm: false)
    static let history = SealedUse("getnotificationhistory.info", members: ["pushToken", "deviceSecret", "limit"], contractForm: false)
    static let markRead = SealedUse("marknotificationsread.info", members: ["pushToken", "deviceSecret", "ids"], contractForm: false)
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
}
