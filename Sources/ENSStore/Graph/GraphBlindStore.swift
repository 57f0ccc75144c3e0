public import MariaDB
public import ENSModel
public import ENSVault

/// The SQL of Graph's `blind` mode (migration 019): one rich subscription per record
/// and device certificate (`GraphBlindSubscriptions`), and the identity platform's
/// signing keys the notifications' validation tokens are checked against
/// (`GraphSigningKeys`). Everything here is public material: certificates, their
/// thumbprints, ids Graph knows, public keys. Public, but not free to change: Graph
/// encrypts each new mail to the certificate a row names, and a validation token is
/// trusted if a cached key signed it, so both tables' rows carry `RowBinding` MACs
/// (migration 021) and a row that fails its MAC is no row (logged).
public struct GraphBlindStore {
    public let database: any SQLDatabase
    let binding: RowBinding

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        binding = RowBinding(vault: vault)
    }

    /// One rich subscription: the certificate Graph encrypts to (and, until the next
    /// renewal after a rotation, the one before it).
    public struct BlindSubscription: Sendable, Equatable {
        public let id: Int64
        public let recordID: Int64
        public let thumbprint: [UInt8]
        public let certificate: [UInt8]
        public let certificateID: String
        public let previousThumbprint: [UInt8]?
        public let previousCertificateID: String?
        public let resource: String
        public let subscriptionID: String?
        public let expiresAt: Timestamp?
        public let renewedAt: Timestamp?

        /// The thumbprints of the devices this subscription's notifications are for.
        public var thumbprints: [[UInt8]] { [thumbprint] + (previousThumbprint.map { [$0] } ?? []) }

        /// Whether Graph's `encryptionCertificateId` names this subscription's current
        /// or previous certificate.
        public func encrypts(to certificateID: String) -> Bool {
            certificateID == self.certificateID || certificateID == previousCertificateID
        }
    }

    private static let columns = """
        id, record_id, thumbprint, certificate, certificate_id, previous_thumbprint, previous_certificate_id, resource,
        subscription_id, expires_at, renewed_at, binding_mac
        """

    static let columnCount = 12
    /// `columns` renamed (blind_*), for a join beside another table's.
    static let aliasedColumns = """
        id AS blind_id, record_id AS blind_record_id, thumbprint AS blind_thumbprint, certificate AS blind_certificate,
        certificate_id AS blind_certificate_id, previous_thumbprint AS blind_previous_thumbprint,
        previous_certificate_id AS blind_previous_certificate_id, resource AS blind_resource, subscription_id AS blind_subscription_id,
        expires_at AS blind_expires_at, renewed_at AS blind_renewed_at, binding_mac AS blind_binding_mac
        """

    /// The MAC of a row with these certificates.
    func mac(id: Int64, recordID: Int64, thumbprint: [UInt8], certificate: [UInt8], certificateID: String, previousThumbprint: [UInt8]?,
             previousCertificateID: String?, resource: String) -> [UInt8] {
        binding.blindSubscription(id: id, recordID: recordID, thumbprint: thumbprint, certificate: certificate, certificateID: certificateID,
                                  previousThumbprint: previousThumbprint, previousCertificateID: previousCertificateID, resource: resource)
    }

    /// A row of `columns`; nil (logged) when it fails its MAC.
    func subscription(from row: Row) throws(DatabaseError) -> BlindSubscription? {
        let (id, record, thumbprint, certificate, certificateID, previousThumbprint, previousID, resource, subscription, expires, renewed)
            = try Row(values: Array(row.values[..<11])).decode(Int64.self, Int64.self, [UInt8].self, [UInt8].self, String.self, [UInt8]?.self,
                                                                String?.self, String.self, String?.self, Timestamp?.self, Timestamp?.self)
        let stored = try Row(values: [row.values[11]]).decode([UInt8]?.self)
        guard RowBinding.matches(stored, mac(id: id, recordID: record, thumbprint: thumbprint, certificate: certificate, certificateID: certificateID,
                                             previousThumbprint: previousThumbprint, previousCertificateID: previousID, resource: resource)) else {
            RowIntegrity.refused("GraphBlindSubscriptions", row: "\(id)")
            return nil
        }
        return BlindSubscription(id: id, recordID: record, thumbprint: thumbprint, certificate: certificate, certificateID: certificateID,
                                 previousThumbprint: previousThumbprint, previousCertificateID: previousID, resource: resource,
                                 subscriptionID: subscription, expiresAt: expires, renewedAt: renewed)
    }

    public func subscription(recordID: Int64, thumbprint: [UInt8]) throws(DatabaseError) -> BlindSubscription? {
        try database.queryOne("""
            SELECT \(unsafe: Self.columns) FROM GraphBlindSubscriptions WHERE record_id = \(recordID) AND thumbprint = \(thumbprint)
            """).flatMap(subscription(from:))
    }

    /// The rich subscription a notification names (Graph's subscription id).
    public func subscription(subscriptionID: String) throws(DatabaseError) -> BlindSubscription? {
        try database.queryOne("""
            SELECT \(unsafe: Self.columns) FROM GraphBlindSubscriptions WHERE subscription_id = \(subscriptionID)
            """).flatMap(subscription(from:))
    }

    public func subscriptions(recordID: Int64) throws(DatabaseError) -> [BlindSubscription] {
        try database.query("""
            SELECT \(unsafe: Self.columns) FROM GraphBlindSubscriptions WHERE record_id = \(recordID) ORDER BY id LIMIT 100
            """).compactMapTyped { row throws(DatabaseError) in try subscription(from: row) }
    }

    /// Reserves the row of a subscription about to be created at Graph (no subscription
    /// id yet); nil when the record already has one for this certificate.
    public func reserve(recordID: Int64, thumbprint: [UInt8], certificate: [UInt8], certificateID: String, resource: String,
                        now: Timestamp) throws(DatabaseError) -> Int64? {
        let result = try database.execute("""
            INSERT IGNORE INTO GraphBlindSubscriptions (record_id, thumbprint, certificate, certificate_id, resource, created_at)
            VALUES (\(recordID), \(thumbprint), \(certificate), \(certificateID), \(resource), \(now.databaseString))
            """)
        guard result.affectedRows > 0 else { return nil }
        let id = result.lastInsertID
        let mac = mac(id: id, recordID: recordID, thumbprint: thumbprint, certificate: certificate, certificateID: certificateID,
                      previousThumbprint: nil, previousCertificateID: nil, resource: resource)
        try database.execute("UPDATE GraphBlindSubscriptions SET binding_mac = \(mac) WHERE id = \(id)")
        return id
    }

    /// Graph created (or renewed, or re-created) the subscription: renewed at about
    /// half its lifetime, and a rotation's previous certificate forgotten — every
    /// notification Graph made before the PATCH has had the time since to arrive.
    public func subscribed(id: Int64, subscriptionID: String, expiresAt: Timestamp, now: Timestamp,
                           keepPrevious: Bool = false) throws(DatabaseError) {
        let renewAfter = GraphSubscriptionStore.renewAfter(now: now, expiresAt: expiresAt)
        try database.atomically { () throws(DatabaseError) in
            // Forgetting the previous certificate changes what the MAC covers: the row is
            // read (and its MAC checked) under its lock, and written with its new MAC.
            guard let row = try database.queryOne("SELECT \(unsafe: Self.columns) FROM GraphBlindSubscriptions WHERE id = \(id) FOR UPDATE"),
                  let current = try subscription(from: row) else { return }
            let previous = keepPrevious ? (current.previousThumbprint, current.previousCertificateID) : (nil, nil)
            let mac = mac(id: id, recordID: current.recordID, thumbprint: current.thumbprint, certificate: current.certificate,
                          certificateID: current.certificateID, previousThumbprint: previous.0, previousCertificateID: previous.1,
                          resource: current.resource)
            try database.execute("""
                UPDATE GraphBlindSubscriptions SET subscription_id = \(subscriptionID), expires_at = \(expiresAt.databaseString),
                    renewed_at = \(now.databaseString), renew_after = \(renewAfter.databaseString),
                    previous_thumbprint = \(previous.0), previous_certificate_id = \(previous.1), binding_mac = \(mac)
                WHERE id = \(id)
                """)
        }
    }

    /// A rotation PATCHed at Graph: the new certificate is current, the old one stays
    /// accepted until the next renewal.
    public func rotated(_ old: BlindSubscription, to thumbprint: [UInt8], certificate: [UInt8], certificateID: String, expiresAt: Timestamp,
                        now: Timestamp) throws(DatabaseError) {
        let id = old.id
        let mac = mac(id: id, recordID: old.recordID, thumbprint: thumbprint, certificate: certificate, certificateID: certificateID,
                      previousThumbprint: old.thumbprint, previousCertificateID: old.certificateID, resource: old.resource)
        try database.execute("""
            UPDATE GraphBlindSubscriptions SET previous_thumbprint = \(old.thumbprint), previous_certificate_id = \(old.certificateID),
                thumbprint = \(thumbprint), certificate = \(certificate), certificate_id = \(certificateID), binding_mac = \(mac),
                expires_at = \(expiresAt.databaseString), renewed_at = \(now.databaseString),
                renew_after = \(GraphSubscriptionStore.renewAfter(now: now, expiresAt: expiresAt).databaseString)
            WHERE id = \(id)
            """)
    }

    public func delete(id: Int64) throws(DatabaseError) {
        try database.execute("DELETE FROM GraphBlindSubscriptions WHERE id = \(id)")
    }

    /// How many of the record's devices use a certificate (as their current one).
    public func deviceCount(recordID: Int64, thumbprint: [UInt8]) throws(DatabaseError) -> Int {
        try database.queryOne("""
            SELECT COUNT(*) FROM Devices WHERE subscription_row = \(recordID) AND privacy_mode = \(PrivacyMode.blind.rawValue)
                AND preview_key = \(thumbprint)
            """)?.decode(Int.self) ?? 0
    }

    /// Rich subscriptions whose renewal is due (ens-cron), or that no device uses any more.
    public func due(now: Timestamp, after lastID: Int64, limit: Int) throws(DatabaseError) -> [BlindSubscription] {
        try database.query("""
            SELECT \(unsafe: Self.columns) FROM GraphBlindSubscriptions
            WHERE (renew_after <= \(now.databaseString) OR subscription_id IS NULL) AND id > \(lastID) ORDER BY id LIMIT \(limit)
            """).compactMapTyped { row throws(DatabaseError) in try subscription(from: row) }
    }

    /// Claims a rich subscription's due renewal for the caller alone (as
    /// `GraphSubscriptionStore.claimDue`).
    public func claimDue(id: Int64, now: Timestamp, hold: Duration) throws(DatabaseError) -> BlindSubscription? {
        guard try database.execute("""
            UPDATE GraphBlindSubscriptions SET renew_after = \(now.adding(hold).databaseString)
            WHERE id = \(id) AND renew_after <= \(now.databaseString)
            """).affectedRows > 0 else { return nil }
        return try database.queryOne("SELECT \(unsafe: Self.columns) FROM GraphBlindSubscriptions WHERE id = \(id)").flatMap(subscription(from:))
    }

    /// A subscription Graph removed (`subscriptionRemoved`): due at once.
    public func renewNow(id: Int64, now: Timestamp) throws(DatabaseError) {
        try database.execute("UPDATE GraphBlindSubscriptions SET renew_after = \(now.databaseString) WHERE id = \(id)")
    }

    /// A subscription Graph removed (`subscriptionRemoved`): expired from now, and due
    /// at once (a new subscription is not a renewal: no spacing applies).
    public func removed(id: Int64, now: Timestamp) throws(DatabaseError) {
        try database.execute("""
            UPDATE GraphBlindSubscriptions SET renew_after = \(now.databaseString),
                expires_at = LEAST(COALESCE(expires_at, \(now.databaseString)), \(now.databaseString))
            WHERE id = \(id)
            """)
    }

    public func postpone(id: Int64, until retry: Timestamp) throws(DatabaseError) {
        try database.execute("UPDATE GraphBlindSubscriptions SET renew_after = \(retry.databaseString) WHERE id = \(id)")
    }

    // MARK: The identity platform's signing keys

    /// One RSA signing key of the JWKS (`kid`, modulus and exponent, big-endian).
    public struct SigningKey: Sendable, Equatable {
        public let kid: String
        public let modulus: [UInt8]
        public let exponent: [UInt8]

        public init(kid: String, modulus: [UInt8], exponent: [UInt8]) {
            self.kid = kid
            self.modulus = modulus
            self.exponent = exponent
        }
    }

    /// The cached keys (the bookkeeping row, kid '', excluded).
    /// A key a database writer put there (to sign validation tokens of their own, and so
    /// forge blind notifications) fails its MAC and is left out (logged).
    public func signingKeys() throws(DatabaseError) -> [SigningKey] {
        try database.query("SELECT kid, modulus, exponent, binding_mac FROM GraphSigningKeys WHERE kid <> '' ORDER BY kid LIMIT 200")
            .compactMapTyped { row throws(DatabaseError) in
                let (kid, modulus, exponent, mac) = try row.decode(String.self, [UInt8].self, [UInt8].self, [UInt8]?.self)
                guard RowBinding.matches(mac, binding.signingKey(kid: kid, modulus: modulus, exponent: exponent)) else {
                    RowIntegrity.refused("GraphSigningKeys", row: kid)
                    return nil
                }
                return SigningKey(kid: kid, modulus: modulus, exponent: exponent)
            }
    }

    /// When the keys were last fetched, by anyone.
    public func lastKeyFetch() throws(DatabaseError) -> Timestamp? {
        try database.queryOne("SELECT fetched_at FROM GraphSigningKeys WHERE kid = ''")?.decode(Timestamp.self)
    }

    /// Claims the right to fetch the keys now: true for at most one caller (of every
    /// process and host) per `spacing`.
    public func claimKeyFetch(now: Timestamp, spacing: Duration) throws(DatabaseError) -> Bool {
        let cutoff = now.subtracting(spacing)
        if try database.execute("""
            UPDATE GraphSigningKeys SET fetched_at = \(now.databaseString) WHERE kid = '' AND fetched_at <= \(cutoff.databaseString)
            """).affectedRows > 0 { return true }
        return try database.execute("""
            INSERT IGNORE INTO GraphSigningKeys (kid, modulus, exponent, fetched_at) VALUES ('', '', '', \(now.databaseString))
            """).affectedRows > 0
    }

    /// Replaces the cached keys with a fetched JWKS.
    public func replaceSigningKeys(_ keys: [SigningKey], now: Timestamp) throws(DatabaseError) {
        try database.atomically { () throws(DatabaseError) in
            try database.execute("DELETE FROM GraphSigningKeys WHERE kid <> ''")
            for key in keys {
                try database.execute("""
                    INSERT INTO GraphSigningKeys (kid, modulus, exponent, fetched_at, binding_mac)
                    VALUES (\(key.kid), \(key.modulus), \(key.exponent), \(now.databaseString),
                            \(binding.signingKey(kid: key.kid, modulus: key.modulus, exponent: key.exponent)))
                    """)
            }
        }
    }
}
