internal import Codecs
public import OpenSSL
public import ENSModel

/// Everything ENS seals or hashes with the master key, each purpose under its own
/// derived key so that one kind of sealed value can never be opened as another.
public struct Vault: Sendable {
    private let privateKeys: AESGCMKey
    private let deviceTokens: AESGCMKey
    private let syncKeys: AESGCMKey
    private let notificationLog: AESGCMKey
    private let tokenHashKey: [UInt8]
    /// Callback URLs (CallbackToken.swift): the MAC key every URL is checked with, and
    /// the base from which each record's sealing key is derived.
    let callbackMACKey: [UInt8]
    let callbackSealBase: [UInt8]
    /// Seals record id, generation and URL key in today's callback URLs, so that no
    /// sequential record id shows in them.
    let callbackRouteSealKey: AESGCMKey
    /// The master key's share of each stored credentials key (`CredentialSeal`; the
    /// other share is in the subscription's callback URL).
    let credentialSealBase: [UInt8]
    /// Graph notification URLs (RoutingToken.swift) and the clientState each
    /// subscription is created with: derived, so neither is stored.
    let routingMACKey: [UInt8]
    /// Seals the record id and generation in Graph notification URLs.
    let routingSealKey: AESGCMKey
    private let clientStateKey: [UInt8]
    /// MACs over database rows a callback or a sealing trusts (`RowBinding`).
    let rowBindingKey: [UInt8]
    /// Device secrets (stored as keyed hashes) and the opaque tag a private push names
    /// its device by instead of the address's hash.
    private let deviceSecretKey: [UInt8]
    private let pushTagKey: [UInt8]
    /// Names the proof throttle's rows (`ProofThrottle`): keyed, so a database reader
    /// cannot test a guessed client address or device against them.
    public let proofThrottleKey: [UInt8]
    /// Names the sealed values already used (`SealedValuesUsed`): keyed, so the table
    /// confirms no guessed plaintext.
    private let sealedOnceKey: [UInt8]
    /// Dovecot servers' hook credentials (derived, never stored) and the routing tokens
    /// their accounts' METADATA carries.
    private let dovecotCredentialKey: [UInt8]
    let dovecotRouteSealKey: AESGCMKey

    public init(masterKey: AESGCMKey) {
        privateKeys = masterKey.derived(label: "ens/v1/private-key")
        deviceTokens = masterKey.derived(label: "ens/v1/device-token")
        syncKeys = masterKey.derived(label: "ens/v1/sync-key")
        notificationLog = masterKey.derived(label: "ens/v1/notification-log")
        // A keyed hash: finding a device by its token must not let a database reader
        // confirm a guessed token.
        tokenHashKey = masterKey.derivedBytes(label: "ens/v1/device-token-hash")
        callbackMACKey = masterKey.derivedBytes(label: "ens/v1/callback-mac")
        callbackSealBase = masterKey.derivedBytes(label: "ens/v1/callback-seal")
        callbackRouteSealKey = masterKey.derived(label: "ens/v2/callback-route-seal")
        credentialSealBase = masterKey.derivedBytes(label: "ens/v1/credential-seal")
        routingMACKey = masterKey.derivedBytes(label: "ens/v1/routing-mac")
        routingSealKey = masterKey.derived(label: "ens/v2/graph-route-seal")
        clientStateKey = masterKey.derivedBytes(label: "ens/v1/graph-client-state")
        rowBindingKey = masterKey.derivedBytes(label: "ens/v1/row-binding")
        deviceSecretKey = masterKey.derivedBytes(label: "ens/v1/device-secret")
        pushTagKey = masterKey.derivedBytes(label: "ens/v1/push-tag")
        proofThrottleKey = masterKey.derivedBytes(label: "ens/v1/proof-throttle")
        sealedOnceKey = masterKey.derivedBytes(label: "ens/v1/sealed-once")
        dovecotCredentialKey = masterKey.derivedBytes(label: "ens/v1/dovecot-credential")
        dovecotRouteSealKey = masterKey.derived(label: "ens/v1/dovecot-route-seal")
    }

    // MARK: Dovecot servers

    /// The secret a registered Dovecot server's push hook authenticates with (HTTP Basic,
    /// the server's name as user): derived from the master key, the name and the
    /// credential's serial, so nothing secret is stored and `ens-cron dovecot rotate`
    /// (a new serial) retires the old one. 32 bytes, base64url.
    public func dovecotCredential(server: String, serial: Int) -> String {
        Base64.encodeURLSafe(Digest.hmacSHA256(key: dovecotCredentialKey, message: Array("ens-dovecot-credential/1/\(server)/\(serial)".utf8)))
    }

    // MARK: Single-use sealed values

    /// What `SealedValuesUsed` records of the act a sealed value asks for: its use, the
    /// record whose key opened it, the time the device sealed it and the device it acts
    /// on (the stored form of its push token; empty for a use that names none), under a
    /// keyed hash. Bytes that parse to the same act (whitespace in a block an attacker
    /// sealed and appended, blocks spliced around the original `sealedAt`) give the same
    /// mark, where the plaintext's digest would differ.
    public func sealedActDigest(purpose: String, recordID: Int64, sealedAt: Int64, device: String) -> [UInt8] {
        var message = Array("ens-sealed-act/1".utf8)
        for field in [purpose, String(recordID), String(sealedAt), device] {
            message.append(0)
            message += Array(field.utf8)
        }
        return Digest.hmacSHA256(key: sealedOnceKey, message: message)
    }

    /// What `SealedValuesUsed` records of one opened sealed value: its use, the record
    /// whose key opened it and its plaintext, under a keyed hash: the mark 0.5.0 and
    /// earlier write and check, kept beside `sealedActDigest` while a cluster may still
    /// run them.
    public func sealedValueDigest(purpose: String, recordID: Int64, plaintext: [UInt8]) -> [UInt8] {
        var message = Array("ens-sealed-once/1".utf8)
        message.append(0)
        message += Array(purpose.utf8)
        message.append(0)
        message += Array(String(recordID).utf8)
        message.append(0)
        message += plaintext
        return Digest.hmacSHA256(key: sealedOnceKey, message: message)
    }

    // MARK: RSA private keys

    /// Seals a private key for the pool (not yet bound to a user).
    public func sealPoolKey(_ key: RSAPrivateKey) throws -> [UInt8] {
        try privateKeys.seal(key.derRepresentation, associatedData: Array("pool".utf8))
    }

    public func openPoolKey(_ sealed: [UInt8]) throws -> RSAPrivateKey {
        try RSAPrivateKey(derRepresentation: privateKeys.open(sealed, associatedData: Array("pool".utf8)))
    }

    /// Seals a private key bound to its user record: a sealed key copied into another
    /// record does not open there.
    public func sealUserKey(_ key: RSAPrivateKey, userID: String) throws -> [UInt8] {
        try privateKeys.seal(key.derRepresentation, associatedData: Array(("user:" + userID).utf8))
    }

    public func openUserKey(_ sealed: [UInt8], userID: String) throws -> RSAPrivateKey {
        try RSAPrivateKey(derRepresentation: privateKeys.open(sealed, associatedData: Array(("user:" + userID).utf8)))
    }

    // MARK: Graph client state

    /// The clientState of a record's Graph subscriptions at one generation: 43
    /// characters of base64url HMAC (Graph allows 128), recomputed for every
    /// notification and compared in constant time, never stored. A notification that
    /// carries it was sent by the Graph subscription ENS created for that record.
    public func graphClientState(recordID: Int64, generation: Int64) -> String {
        Base64.encodeURLSafe(Digest.hmacSHA256(key: clientStateKey, message: Array("graph-client-state/\(recordID)/\(generation)".utf8)))
    }

    /// The clientState of a record's rich (`blind`) subscription `blindID`: distinct from
    /// the record's own, so neither subscription's notifications pass as the other's.
    public func graphBlindClientState(recordID: Int64, blindID: Int64) -> String {
        Base64.encodeURLSafe(Digest.hmacSHA256(key: clientStateKey, message: Array("graph-blind-client-state/\(recordID)/\(blindID)".utf8)))
    }

    // MARK: Device tokens

    /// The lookup key for a device token (HMAC-SHA-256 of its stored form: an APNs
    /// token's lowercase hex, `fcm:<token>` for FCM).
    public func tokenHash(_ token: DeviceToken) -> [UInt8] {
        Digest.hmacSHA256(key: tokenHashKey, message: Array(token.storedForm.utf8))
    }

    public func sealToken(_ token: DeviceToken) throws -> [UInt8] {
        try deviceTokens.seal(Array(token.storedForm.utf8), associatedData: Array("device-token".utf8))
    }

    public func openToken(_ sealed: [UInt8]) throws -> DeviceToken? {
        DeviceToken(storedForm: String(decoding: try deviceTokens.open(sealed, associatedData: Array("device-token".utf8)), as: UTF8.self))
    }

    // MARK: Device secrets and push tags

    /// What is stored of a device's secret (`Devices.secret_hash`): a keyed hash, so a
    /// database reader cannot use it nor confirm a guess.
    public func deviceSecretHash(_ secret: [UInt8]) -> [UInt8] {
        Digest.hmacSHA256(key: deviceSecretKey, message: secret)
    }

    /// The opaque id a push in `generic`, `encrypted` or `secure` mode names its device
    /// by (`ens.tag`): 16 characters of base64url, stable for the device's row, meaning
    /// nothing to the push service (the address's hash would name the mailbox).
    public func pushTag(deviceID: Int64) -> String {
        Base64.encodeURLSafe(Array(Digest.hmacSHA256(key: pushTagKey, message: Array("device/\(deviceID)".utf8)).prefix(12)))
    }

    // MARK: Sync keys

    public func sealSyncKey(_ syncKey: String, tokenHash: [UInt8]) throws -> [UInt8] {
        try syncKeys.seal(Array(syncKey.utf8), associatedData: tokenHash)
    }

    public func openSyncKey(_ sealed: [UInt8], tokenHash: [UInt8]) throws -> String {
        String(decoding: try syncKeys.open(sealed, associatedData: tokenHash), as: UTF8.self)
    }

    // MARK: Notification log

    /// What the notification log keeps of one notification: its history entry or the
    /// content a `secure` device fetches. Bound to the notification, its device and the
    /// part, so no sealed value opens in another row or as the other part.
    public enum LogPart: String, Sendable { case summary, content }

    public func sealLogEntry(_ bytes: [UInt8], part: LogPart, notificationID: [UInt8], deviceID: Int64) throws -> [UInt8] {
        try notificationLog.seal(bytes, associatedData: Self.logBinding(part, notificationID, deviceID))
    }

    public func openLogEntry(_ sealed: [UInt8], part: LogPart, notificationID: [UInt8], deviceID: Int64) throws -> [UInt8] {
        try notificationLog.open(sealed, associatedData: Self.logBinding(part, notificationID, deviceID))
    }

    private static func logBinding(_ part: LogPart, _ notificationID: [UInt8], _ deviceID: Int64) -> [UInt8] {
        Array("notification-log/\(part.rawValue)/\(deviceID)/".utf8) + notificationID
    }
}
