public import MariaDB
internal import POSIX
public import ENSModel
public import ENSVault

/// The SQL a Graph subscription needs beyond every backend's (`MailSubscriptionStore`):
/// its tenant and expiry, the renewal schedule ens-cron keeps, finding records by the
/// subscription a notification names, and remembering which new-mail events were
/// already handed to the sender (Graph delivers at least once).
public struct GraphSubscriptionStore {
    public let database: any SQLDatabase

    public init(database: any SQLDatabase) {
        self.database = database
    }

    /// Graph renews never within this long of each other: a lifecycle event that asks
    /// for a renewal right after one is already answered.
    public static let renewalSpacing: Duration = .minutes(10)

    /// Makes an attempt's Graph subscription the live one (see
    /// `MailSubscriptionStore.completeRegistration`): the subscription counts as heard
    /// until it expires (its "heartbeat" is its lifetime), and is renewed after half.
    /// `binding` MACs tenant, path and endpoint (`RowBinding`).
    public func completeRegistration(recordID: Int64, generation: Int64, tenantID: String, userPath: String, subscription id: String,
                                     expiresAt: Timestamp, now: Timestamp, binding: RowBinding) throws(DatabaseError) -> Bool {
        let lifetime = max(1, (expiresAt.millisecondsSinceEpoch - now.millisecondsSinceEpoch) / 60_000)
        let endpoint = Self.endpoint(tenantID: tenantID)
        let mac = binding.subscription(recordID: recordID, generation: generation, backend: MailBackend.graph.rawValue, backendURL: userPath,
                                       tenant: tenantID, endpoint: endpoint)
        return try database.execute("""
            UPDATE EnsSubscriptionInfo SET generation = \(generation), registered = 1, mail_backend = \(MailBackend.graph),
                backend_url = \(userPath), backend_tenant = \(tenantID), endpoint = \(endpoint), binding_mac = \(mac),
                subscription_id = \(id), watermark = NULL, backend_version = NULL,
                subscription_expires_at = \(expiresAt.databaseString), renewed_at = \(now.databaseString),
                renew_after = \(Self.renewAfter(now: now, expiresAt: expiresAt).databaseString),
                heartbeat_minutes = \(lifetime), last_callback_at = \(now.databaseString),
                pending_started_at = IF(pending_generation = \(generation), NULL, pending_started_at)
            WHERE id = \(recordID) AND generation < \(generation)
            """).affectedRows > 0
    }

    /// What a Graph subscription's devices are bound to (`Devices.endpoint`): the tenant
    /// whose application ENS reads the mailbox with.
    public static func endpoint(tenantID: String) -> String { "graph:\(tenantID)" }

    /// Renewal at about half the lifetime left.
    static func renewAfter(now: Timestamp, expiresAt: Timestamp) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: now.millisecondsSinceEpoch + max(0, expiresAt.millisecondsSinceEpoch - now.millisecondsSinceEpoch) / 2)
    }

    /// Where a record's mailbox is: its tenant and its path under Graph's /v1.0.
    public func mailbox(recordID: Int64) throws(DatabaseError) -> (tenantID: String, userPath: String)? {
        guard let row = try database.queryOne("""
            SELECT backend_tenant, backend_url FROM EnsSubscriptionInfo WHERE id = \(recordID) AND mail_backend = \(MailBackend.graph)
            """) else { return nil }
        let (tenant, path) = try row.decode(String?.self, String?.self)
        guard let tenant, let path else { return nil }
        return (tenant, path)
    }

    /// `reauthorizationRequired`: ens-cron renews the subscription on its next run, or,
    /// when the last renewal is under ten minutes old, on its first run ten minutes after
    /// it (Graph must never see a renewal twice within ten minutes). Never later than
    /// already planned. Returns when the renewal is due.
    @discardableResult
    public func requestRenewal(recordID: Int64, generation: Int64, now: Timestamp) throws(DatabaseError) -> Timestamp? {
        let spacing = Int64(Self.renewalSpacing.components.seconds)
        try database.execute("""
            UPDATE EnsSubscriptionInfo
            SET renew_after = LEAST(COALESCE(renew_after,
                                             GREATEST(\(now.databaseString),
                                                      COALESCE(renewed_at + INTERVAL \(spacing) SECOND, \(now.databaseString)))),
                                    GREATEST(\(now.databaseString), COALESCE(renewed_at + INTERVAL \(spacing) SECOND, \(now.databaseString))))
            WHERE id = \(recordID) AND generation = \(generation) AND mail_backend = \(MailBackend.graph)
            """)
        return try database.queryOne("""
            SELECT renew_after FROM EnsSubscriptionInfo WHERE id = \(recordID) AND generation = \(generation) AND mail_backend = \(MailBackend.graph)
            """).flatMap { row throws(DatabaseError) in try row.decode(Timestamp?.self) }
    }

    /// `subscriptionRemoved`: Graph has ended the subscription, so ens-cron's next run
    /// creates a new one at once (a new subscription is not a renewal: the ten-minute
    /// spacing does not apply). The subscription counts as expired from now.
    public func subscriptionRemoved(recordID: Int64, generation: Int64, now: Timestamp) throws(DatabaseError) {
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET renew_after = \(now.databaseString),
                subscription_expires_at = LEAST(COALESCE(subscription_expires_at, \(now.databaseString)), \(now.databaseString))
            WHERE id = \(recordID) AND generation = \(generation) AND mail_backend = \(MailBackend.graph)
            """)
    }

    // MARK: ens-cron renew

    /// A subscription whose renewal is due.
    public struct Due: Sendable {
        public let recordID: Int64
        public let generation: Int64
        /// The user's id: its bucket goes into a re-created subscription's URL.
        public let userID: String
        public let tenantID: String?
        public let userPath: String?
        public let subscriptionID: String?
        public let expiresAt: Timestamp?
        public let renewedAt: Timestamp?
        let endpoint: String?
        let bindingMAC: [UInt8]?

        /// Whether tenant and user path are as ENS wrote them (`RowBinding`): a renewal
        /// of an edited row would subscribe someone else's mailbox for this record.
        public func isAuthentic(_ binding: RowBinding) -> Bool {
            RowBinding.matches(bindingMAC, binding.subscription(recordID: recordID, generation: generation, backend: MailBackend.graph.rawValue,
                                                                backendURL: userPath, tenant: tenantID, endpoint: endpoint))
        }
    }

    public func due(now: Timestamp, after lastID: Int64, limit: Int) throws(DatabaseError) -> [Due] {
        try database.query("""
            SELECT \(unsafe: Self.dueColumns)
            FROM EnsSubscriptionInfo
            WHERE mail_backend = \(MailBackend.graph) AND registered = 1 AND renew_after <= \(now.databaseString) AND id > \(lastID)
            ORDER BY id LIMIT \(limit)
            """).map(Self.due(from:))
    }

    /// A constant, so `unsafe:` splices no input into the SQL.
    private static let dueColumns = """
        id, generation, backend_tenant, backend_url, subscription_id, subscription_expires_at, renewed_at, endpoint, binding_mac, userid
        """

    private static func due(from row: Row) throws(DatabaseError) -> Due {
        let (id, generation, tenant, path, subscription, expires, renewed, endpoint, mac, userID)
            = try row.decode(Int64.self, Int64.self, String?.self, String?.self, String?.self, Timestamp?.self, Timestamp?.self, String?.self,
                             [UInt8]?.self, String.self)
        return Due(recordID: id, generation: generation, userID: userID, tenantID: tenant, userPath: path, subscriptionID: subscription,
                   expiresAt: expires, renewedAt: renewed, endpoint: endpoint, bindingMAC: mac)
    }

    /// Claims a renewal that is due now for the caller alone (a lifecycle event's
    /// responder, one host in the cluster): it moves the due time `hold` ahead, so
    /// neither another responder nor ens-cron starts it too, and returns the row; nil
    /// when it is not due or someone else has it. If the caller fails or dies, the
    /// renewal is due again after `hold`.
    public func claimDue(recordID: Int64, generation: Int64, now: Timestamp, hold: Duration) throws(DatabaseError) -> Due? {
        guard try database.execute("""
            UPDATE EnsSubscriptionInfo SET renew_after = \(now.adding(hold).databaseString)
            WHERE id = \(recordID) AND generation = \(generation) AND mail_backend = \(MailBackend.graph) AND registered = 1
                AND renew_after <= \(now.databaseString)
            """).affectedRows > 0 else { return nil }
        return try database.query("""
            SELECT \(unsafe: Self.dueColumns)
            FROM EnsSubscriptionInfo WHERE id = \(recordID) AND generation = \(generation)
            """).map(Self.due(from:)).first
    }

    /// A renewal (or re-creation) succeeded.
    public func renewed(recordID: Int64, generation: Int64, subscriptionID: String, expiresAt: Timestamp, now: Timestamp) throws(DatabaseError) {
        let lifetime = max(1, (expiresAt.millisecondsSinceEpoch - now.millisecondsSinceEpoch) / 60_000)
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET subscription_id = \(subscriptionID), subscription_expires_at = \(expiresAt.databaseString),
                renewed_at = \(now.databaseString), renew_after = \(Self.renewAfter(now: now, expiresAt: expiresAt).databaseString),
                heartbeat_minutes = \(lifetime), last_callback_at = \(now.databaseString)
            WHERE id = \(recordID) AND generation = \(generation) AND mail_backend = \(MailBackend.graph)
            """)
    }

    /// A renewal that failed for a reason that may pass (Graph down, throttled): tried
    /// again after `retry`, unless the subscription expires first.
    public func postpone(recordID: Int64, generation: Int64, until retry: Timestamp) throws(DatabaseError) {
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET renew_after = \(retry.databaseString)
            WHERE id = \(recordID) AND generation = \(generation) AND mail_backend = \(MailBackend.graph)
            """)
    }
}
