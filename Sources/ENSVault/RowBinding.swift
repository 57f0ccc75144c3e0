internal import OpenSSL

/// MACs under the master key over what a callback, a registration or a sealing takes
/// from the database on trust (migration 014, docs/security.md "A writer to the
/// database"): a subscription's server and mailbox (`EnsSubscriptionInfo.binding_mac`)
/// and the public half of its box key (`MailCredentials.box_key_mac`). Someone who can
/// write rows but has no master key cannot point a callback's opened credentials at a
/// host of their own, nor have fresh credentials sealed to a key of their own: an
/// edited row fails its MAC, is refused and logged, and nothing is sent or sealed.
public struct RowBinding: Sendable {
    private let key: [UInt8]

    public static let size = 16

    public init(vault: Vault) {
        key = vault.rowBindingKey
    }

    /// What a subscription row says about where its mail is: the backend, its URL (EWS:
    /// the EWS URL; Graph: the user's path), the tenant, and the server devices are
    /// bound to, for this record and generation.
    public func subscription(recordID: Int64, generation: Int64, backend: String, backendURL: String?, tenant: String?,
                             endpoint: String?) -> [UInt8] {
        mac("subscription", [String(recordID), String(generation), backend, backendURL, tenant, endpoint])
    }

    /// The public half of one subscription attempt's box key.
    public func boxKey(recordID: Int64, generation: Int64, publicKey: [UInt8]) -> [UInt8] {
        mac("box-key", [String(recordID), String(generation)], tail: publicKey)
    }

    /// What a device row says about whose it is and what it may receive: its row and
    /// record, its push token's and secret's hashes, its app, privacy mode and key, and
    /// the server it proved itself at. A row copied to another record or id, or given
    /// another device's token or secret, or another mode, key or server, fails.
    ///
    /// `epoch` is the record's device epoch (`EnsSubscriptionInfo.device_epoch`), the
    /// freshness counter every change to one of the record's devices advances, rebinding
    /// all of them: a device row restored from an older backup carries an older epoch
    /// and fails, unless the record's row is restored with it. Epoch 0 (no change since
    /// migration 023) gives the MAC of before it, so rows written earlier stay valid.
    public func device(id: Int64, recordID: Int64, tokenHash: [UInt8], bundleID: String, privacyMode: Int, previewKey: [UInt8]?,
                       endpoint: String?, secretHash: [UInt8]?, epoch: Int64) -> [UInt8] {
        let fields = [String(id), String(recordID), bundleID, String(privacyMode), endpoint]
        guard epoch != 0 else { return mac("device", fields, binary: [tokenHash, previewKey, secretHash]) }
        return mac("device-at-epoch", fields + [String(epoch)], binary: [tokenHash, previewKey, secretHash])
    }

    /// Which device supplied a subscription's stored credentials (`MailCredentials`,
    /// migration 023): they are erased when it leaves the record, so a supplier
    /// cleared or swapped by a writer must not pass for the real one.
    public func credentialSupplier(recordID: Int64, generation: Int64, suppliedBy: [UInt8]?) -> [UInt8] {
        mac("credential-supplier", [String(recordID), String(generation)], binary: [suppliedBy])
    }

    /// Which device offered one box of fresh credentials (`MailCredentialsFresh`), bound
    /// to the box itself, so suppliers cannot be swapped between two boxes.
    public func freshSupplier(recordID: Int64, generation: Int64, suppliedBy: [UInt8]?, box: [UInt8]) -> [UInt8] {
        mac("fresh-credential-supplier", [String(recordID), String(generation)], binary: [suppliedBy, Digest.sha256(box)])
    }

    /// A claim (migration 024): the record row, named by its placeholder `userID`, that
    /// holds a subscription of the user `claimOf` at `endpoint`, the server its devices
    /// proved themselves at while Autodiscover confirmed neither that server nor the
    /// user's live one.
    public func claim(userID: String, claimOf: String, endpoint: String) -> [UInt8] {
        mac("claim", [userID, claimOf, endpoint])
    }

    /// An Autodiscover answer kept for a domain: the EWS URL its mailboxes' credentials
    /// are sent to, and until when.
    public func urlCache(domain: String, ewsURL: String, expiresAt: String) -> [UInt8] {
        mac("ews-url-cache", [domain, ewsURL, expiresAt])
    }

    /// A blind-mode rich subscription: the certificates Graph encrypts to (current and
    /// previous) and their ids, for this row, record and Graph resource.
    public func blindSubscription(id: Int64, recordID: Int64, thumbprint: [UInt8], certificate: [UInt8], certificateID: String,
                                  previousThumbprint: [UInt8]?, previousCertificateID: String?, resource: String) -> [UInt8] {
        mac("blind-subscription", [String(id), String(recordID), certificateID, previousCertificateID, resource],
            binary: [thumbprint, certificate, previousThumbprint])
    }

    /// A registered Dovecot server: its IMAP URL (where devices' passwords are proven),
    /// the mail domains it serves, the certificate it is trusted by, its push driver
    /// (which METADATA key holds the opt-in), and the serial of
    /// its hook credential. An edited row is refused: no password goes to a host of a
    /// writer's choosing, no domain is taken over, no retired credential is revived.
    public func dovecotServer(name: String, imapURL: String, domains: String, caPEM: [UInt8]?, driver: String, credentialSerial: Int) -> [UInt8] {
        mac("dovecot-server", [name, imapURL, domains, driver, String(credentialSerial)], binary: [caPEM])
    }

    /// A signing key of the Microsoft identity platform, as ENS fetched it.
    public func signingKey(kid: String, modulus: [UInt8], exponent: [UInt8]) -> [UInt8] {
        mac("graph-signing-key", [kid], binary: [modulus, exponent])
    }

    /// Whether `stored` is the MAC `expected`; a missing MAC never matches.
    public static func matches(_ stored: [UInt8]?, _ expected: [UInt8]) -> Bool {
        guard let stored, stored.count == size else { return false }
        return Digest.constantTimeEqual(stored, expected)
    }

    /// Each field length-prefixed (absent: 0xFFFFFFFF), text first and then bytes, so
    /// no two field lists share an encoding.
    private func mac(_ purpose: String, _ fields: [String?], binary: [[UInt8]?]) -> [UInt8] {
        var message = Array("ens-row-binding/1/\(purpose)".utf8)
        func append(_ bytes: [UInt8]?) {
            let length = bytes.map { UInt32($0.count) } ?? UInt32.max
            message += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
            message += bytes ?? []
        }
        for field in fields { append(field.map { Array($0.utf8) }) }
        for field in binary { append(field) }
        return Array(Digest.hmacSHA256(key: key, message: message).prefix(Self.size))
    }

    private func mac(_ purpose: String, _ fields: [String?], tail: [UInt8] = []) -> [UInt8] {
        mac(purpose, fields, binary: [tail])
    }
}
