public import MariaDB
internal import OpenSSL
public import ENSModel
public import ENSVault

/// The SQL behind every mail backend's registrations and callbacks: a record's
/// subscription (which backend, its generations, its heartbeat), the devices a
/// new-mail callback notifies and the per-minute push cap (the proof throttle is
/// `ProofThrottle`). Credentials never pass through here.
public struct MailSubscriptionStore {
    public let database: any SQLDatabase
    public let vault: Vault

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        self.vault = vault
    }

    var binding: RowBinding { RowBinding(vault: vault) }

    /// What a callback needs of its record.
    public struct CallbackRecord: Sendable {
        public let id: Int64
        public let userID: String
        public let generation: Int64
        /// The highest generation a registration attempt has taken, and when the newest
        /// attempt started: a callback URL above `generation` but not above this belongs
        /// to an attempt that may still be between Subscribe and its commit.
        public let pendingGeneration: Int64
        public let pendingStartedAt: Timestamp?
        public let backend: MailBackend
        public let subscriptionID: String?
        public let watermark: String?
        /// Where the backend is reached for this mailbox, and the protocol version the
        /// server accepted (EWS: the EWS URL and its RequestServerVersion; Graph: the
        /// user's path under /v1.0, and the tenant in `backendTenant`).
        public let backendURL: String?
        public let backendVersion: String?
        public let backendTenant: String?
        /// The server the live subscription is at (`Devices.endpoint`): only devices that
        /// proved themselves there hear its callbacks.
        public let endpoint: String?
        /// The record's sealed private key: the per-record input of the callback key.
        public let keyMaterial: [UInt8]
        /// The live subscription's stored credentials (still sealed), read with the
        /// record so that a callback needs no second round trip; nil when none are
        /// stored, or when fresh credentials wait (the callback then reads both).
        public let liveCredentials: [UInt8]?
        /// The row's `RowBinding` MAC over backend, URL, tenant and endpoint.
        let bindingMAC: [UInt8]?
        /// For a claim (migration 024): its placeholder userid, its server and its MAC
        /// (`userID` is then the user's, `claim_of`).
        let claim: (placeholder: String, endpoint: String?, mac: [UInt8]?)?
        /// The per-minute push count and when its minute began, as the row was read.
        let notifyCount: Int64
        let notifyWindowStartedAt: Timestamp?

        /// How many pushes the record may still make in its current minute, as the row
        /// was read with the record (a hint, like `notificationsLeft(recordID:)`, whose
        /// round trip it saves: `reserveNotifications` decides).
        public func notificationsLeft(limit: Int, now: Timestamp) -> Int {
            let windowIsCurrent = notifyWindowStartedAt.map { $0 > now.adding(seconds: -60) } ?? false
            return max(0, limit - (windowIsCurrent ? Int(clamping: notifyCount) : 0))
        }

        /// Whether backend, URL, tenant and endpoint are as ENS wrote them: false for a
        /// row edited without the master key, whose URL or tenant must not be used.
        /// A claim's row must also be the claim ENS made for this user and server, so
        /// its pushes name the user (`userID`) they are for.
        public func isAuthentic(_ binding: RowBinding) -> Bool {
            if let claim {
                guard let claimEndpoint = claim.endpoint,
                      RowBinding.matches(claim.mac, binding.claim(userID: claim.placeholder, claimOf: userID, endpoint: claimEndpoint)) else {
                    return false
                }
            }
            return RowBinding.matches(bindingMAC, binding.subscription(recordID: id, generation: generation, backend: backend.rawValue,
                                                                       backendURL: backendURL, tenant: backendTenant, endpoint: endpoint))
        }

        /// How long a registration attempt may sit between subscribing and its commit
        /// before notifications of its generation stop being asked to retry (a responder
        /// that died there leaves an orphan subscription, which then ends).
        public static let pendingRegistrationSeconds: Int64 = 120

        /// Whether a notification URL of `generation` belongs to a registration that has
        /// subscribed but not yet committed: the mail server is asked to retry, since by
        /// then the subscription is recorded (or lost its race).
        public func isRegistrationPending(generation urlGeneration: Int64, now: Timestamp) -> Bool {
            guard urlGeneration > generation, urlGeneration <= pendingGeneration, let pendingStartedAt else { return false }
            return pendingStartedAt.adding(seconds: Self.pendingRegistrationSeconds) > now
        }
    }

    // MARK: Registration

    /// What a registration needs to know of its record's current subscription.
    public struct SubscriptionState: Sendable {
        public let generation: Int64
        public let registered: Bool
        public let backend: MailBackend
        public let subscriptionID: String?
        public let backendURL: String?
        public let backendVersion: String?
        /// The server the subscription is at (migration 013): what joining devices are
        /// bound to.
        public let endpoint: String?
        /// Whether URL and endpoint passed the row's `RowBinding` MAC; a row that did not
        /// is treated as no live subscription (a registration replaces it).
        public let isAuthentic: Bool

        /// A subscription the backend holds for this record: the one a device must prove
        /// itself against, and the one a forced registration may only replace with proof.
        public var isLive: Bool { registered && subscriptionID != nil && backendURL != nil && isAuthentic }
    }

    public func subscriptionState(recordID: Int64) throws(DatabaseError) -> SubscriptionState? {
        try database.queryOne("""
            SELECT generation, registered, mail_backend, subscription_id, backend_url, backend_version, endpoint, backend_tenant, binding_mac
            FROM EnsSubscriptionInfo WHERE id = \(recordID)
            """).map { row throws(DatabaseError) in
            let (generation, registered, backend, subscriptionID, backendURL, backendVersion, endpoint, tenant, mac)
                = try row.decode(Int64.self, Bool.self, MailBackend.self, String?.self, String?.self, String?.self, String?.self, String?.self,
                                 [UInt8]?.self)
            let authentic = RowBinding.matches(mac, binding.subscription(recordID: recordID, generation: generation, backend: backend.rawValue,
                                                                         backendURL: backendURL, tenant: tenant, endpoint: endpoint))
            return SubscriptionState(generation: generation, registered: registered, backend: backend, subscriptionID: subscriptionID,
                                     backendURL: backendURL, backendVersion: backendVersion, endpoint: endpoint, isAuthentic: authentic)
        }
    }

    /// Starts a (re)registration attempt without touching the live subscription: the
    /// attempt gets a generation higher than any handed out before (for its callback
    /// URL) while `generation`, `registered` and the subscription columns stay as they
    /// are, so the current subscription keeps delivering whatever this attempt meets.
    /// Returns the attempt's generation and the record's key material for sealing the
    /// new callback URL; nil if the record is gone.
    public func beginRegistration(recordID: Int64, now: Timestamp) throws(DatabaseError) -> (generation: Int64, keyMaterial: [UInt8])? {
        try database.atomically { () throws(DatabaseError) in
            // The row lock taken by the UPDATE holds until COMMIT, so the SELECT reads
            // this attempt's number even when another attempt runs at the same time.
            try database.execute("""
                UPDATE EnsSubscriptionInfo SET pending_generation = GREATEST(pending_generation, generation) + 1,
                    pending_started_at = \(now.databaseString)
                WHERE id = \(recordID)
                """)
            guard let row = try database.queryOne("""
                SELECT pending_generation, private_key_sealed FROM EnsSubscriptionInfo WHERE id = \(recordID)
                """) else {
                return nil
            }
            let (generation, keyMaterial) = try row.decode(Int64.self, [UInt8].self)
            return (generation, keyMaterial)
        }
    }

    /// Makes an attempt's subscription the live one, unless an attempt with a later
    /// generation already did (then this one's callbacks are answered Unsubscribe and
    /// the later one stays: concurrent registrations end with exactly one winner).
    /// The subscription counts as heard from now.
    /// The credentials stored for older generations go with it: their URLs now only hear
    /// Unsubscribe.
    /// `endpoint` is the server's origin (`Devices.endpoint`).
    public func completeRegistration(recordID: Int64, generation: Int64, backend: MailBackend, backendURL: String, endpoint: String,
                                     subscriptionID: String, watermark: String?, version: String?, heartbeatMinutes: Int,
                                     now: Timestamp) throws(DatabaseError) -> Bool {
        try database.atomically { () throws(DatabaseError) in
            let won = try database.execute("""
                UPDATE EnsSubscriptionInfo SET generation = \(generation), registered = 1, mail_backend = \(backend), backend_url = \(backendURL),
                    backend_tenant = NULL, endpoint = \(endpoint),
                    binding_mac = \(binding.subscription(recordID: recordID, generation: generation, backend: backend.rawValue,
                                                         backendURL: backendURL, tenant: nil, endpoint: endpoint)),
                    subscription_id = \(subscriptionID), watermark = \(watermark), backend_version = \(version),
                    heartbeat_minutes = \(heartbeatMinutes), last_callback_at = \(now.databaseString),
                    pending_started_at = IF(pending_generation = \(generation), NULL, pending_started_at)
                WHERE id = \(recordID) AND generation < \(generation)
                """).affectedRows > 0
            if won {
                try database.execute("DELETE FROM MailCredentials WHERE record_id = \(recordID) AND generation < \(generation)")
                try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND generation < \(generation)")
            }
            return won
        }
    }

    // MARK: Events already handed on

    /// Claims new-mail events for a record (`keys`: 16-byte hashes) and returns the ones
    /// not handed on before (Graph's items, Dovecot's messages). Call it inside the transaction that hands them on: the rows
    /// stay locked until it commits, so a redelivery meanwhile waits for the outcome
    /// (committed: a duplicate; rolled back: the redelivery's to deliver), at most
    /// `claimWait` before the conflict is thrown and the backend is asked to retry.
    public func claimItems(recordID: Int64, keys: [[UInt8]], now: Timestamp) throws(DatabaseError) -> [[UInt8]] {
        // In one order, so two batches sharing items cannot each hold what the other waits for.
        try keys.sorted { $0.lexicographicallyPrecedes($1) }.compactMapTyped { key throws(DatabaseError) in
            try database.execute("""
                SET STATEMENT innodb_lock_wait_timeout = \(unsafe: String(Self.claimWaitSeconds)) FOR
                INSERT IGNORE INTO MailItemsSeen (record_id, item_hash, seen_at) VALUES (\(recordID), \(key), \(now.databaseString))
                """).affectedRows > 0 ? key : nil
        }
    }

    /// How long a redelivery waits for the request still handing the same event on
    /// (Graph's lookups have a budget of 1.5 s, and it gives up on an attempt after 3 s;
    /// Dovecot's push plugin waits 2 s).
    public static let claimWaitSeconds = 3

    // MARK: Stored credentials (keyed callback URLs, CallbackToken)

    /// Stores an attempt's credentials, sealed with its `CredentialSeal`, and the public
    /// half of its box key, before it subscribes: the mail server may call back as soon
    /// as the subscription exists. `suppliedBy` is the registering device's token hash:
    /// the credentials are erased when that device leaves the record (`CredentialErasure`).
    public func storeCredentials(recordID: Int64, generation: Int64, sealed: [UInt8], boxPublicKey: [UInt8], suppliedBy: [UInt8],
                                 now: Timestamp) throws(DatabaseError) {
        let mac = binding.boxKey(recordID: recordID, generation: generation, publicKey: boxPublicKey)
        let supplierMAC = binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: suppliedBy)
        try database.execute("""
            INSERT INTO MailCredentials (record_id, generation, sealed, box_public_key, box_key_mac, supplied_by, supplier_mac, created_at)
            VALUES (\(recordID), \(generation), \(sealed), \(boxPublicKey), \(mac), \(suppliedBy), \(supplierMAC), \(now.databaseString))
            ON DUPLICATE KEY UPDATE sealed = VALUES(sealed), box_public_key = VALUES(box_public_key), box_key_mac = VALUES(box_key_mac),
                supplied_by = VALUES(supplied_by), supplier_mac = VALUES(supplier_mac), created_at = VALUES(created_at)
            """)
    }

    /// One subscription's sealed credentials and the newest fresh credentials left for
    /// it (with their row id), in one round trip; nil when none are stored (a superseded
    /// or abandoned attempt, or a deleted record). Fresh credentials count only once the
    /// device that offered them is registered on the record: a registration that proved
    /// itself but was never recorded leaves nothing that gets used (`ens-cron reap`
    /// erases such rows).
    ///
    /// A fresh row whose supplier fails its MAC (`supplier_mac`: a writer cleared or
    /// swapped it) is not handed out (refused, logged): the current credentials stay.
    public func storedCredentials(recordID: Int64, generation: Int64) throws(DatabaseError) -> (sealed: [UInt8], fresh: FreshCredentials?)? {
        guard let row = try database.queryOne("""
            SELECT c.sealed, f.id, f.box, f.supplied_by, f.supplier_mac FROM MailCredentials c
            LEFT JOIN MailCredentialsFresh f ON f.record_id = c.record_id AND f.generation = c.generation
              AND (f.supplied_by IS NULL OR EXISTS (SELECT 1 FROM Devices d WHERE d.subscription_row = f.record_id AND d.token_hash = f.supplied_by))
            WHERE c.record_id = \(recordID) AND c.generation = \(generation)
            ORDER BY f.id DESC LIMIT 1
            """) else { return nil }
        let (sealed, freshID, box, suppliedBy, supplierMAC) = try row.decode([UInt8].self, Int64?.self, [UInt8]?.self, [UInt8]?.self, [UInt8]?.self)
        guard let freshID, let box else { return (sealed, nil) }
        guard RowBinding.matches(supplierMAC, binding.freshSupplier(recordID: recordID, generation: generation,
                                                                    suppliedBy: suppliedBy, box: box)) else {
            RowIntegrity.refused("MailCredentialsFresh", row: "\(freshID)")
            return (sealed, nil)
        }
        return (sealed, FreshCredentials(id: freshID, box: box, suppliedBy: suppliedBy))
    }

    /// Credentials a device left for a subscription's next callback, and which device.
    public struct FreshCredentials: Sendable {
        public let id: Int64
        public let box: [UInt8]
        /// The offering device's token hash; nil for rows from before migration 016.
        public let suppliedBy: [UInt8]?

        public init(id: Int64, box: [UInt8], suppliedBy: [UInt8]?) {
            self.id = id
            self.box = box
            self.suppliedBy = suppliedBy
        }
    }

    /// The live subscription's box key (its public half), for sealing fresh credentials;
    /// nil when the record has no keyed subscription, or when its server is not
    /// `endpoint`, the one the offering device proved itself at: a device's credentials
    /// are never handed to a subscription at another server.
    /// A box key whose `RowBinding` MAC fails (written without the master key) is
    /// `.tampered`: nothing is sealed to it.
    public func liveBoxKey(recordID: Int64, endpoint: String) throws(DatabaseError) -> BoxKey {
        guard let row = try database.queryOne("""
            SELECT c.generation, c.box_public_key, c.box_key_mac FROM EnsSubscriptionInfo s
            JOIN MailCredentials c ON c.record_id = s.id AND c.generation = s.generation
            WHERE s.id = \(recordID) AND s.registered = 1 AND s.endpoint = \(endpoint)
            """) else { return .none }
        let (generation, publicKey, mac) = try row.decode(Int64.self, [UInt8].self, [UInt8]?.self)
        guard RowBinding.matches(mac, binding.boxKey(recordID: recordID, generation: generation, publicKey: publicKey)) else { return .tampered }
        return .key(generation: generation, publicKey: publicKey)
    }

    public enum BoxKey: Equatable {
        case key(generation: Int64, publicKey: [UInt8])
        /// No keyed live subscription at that server.
        case none
        /// The stored key fails its MAC.
        case tampered
    }

    /// Leaves fresh credentials, sealed to the subscription's box key, for its next callback.
    /// A refusal of the token endpoint is forgotten: the device did what its check-in
    /// was told (docs/api.md), and these are tried at the next callback. `suppliedBy`
    /// is the offering device's token hash (`CredentialErasure`).
    public func offerFreshCredentials(recordID: Int64, generation: Int64, box: [UInt8], suppliedBy: [UInt8], now: Timestamp) throws(DatabaseError) {
        try database.atomically { () throws(DatabaseError) in
            let supplierMAC = binding.freshSupplier(recordID: recordID, generation: generation, suppliedBy: suppliedBy, box: box)
            try database.execute("""
                INSERT INTO MailCredentialsFresh (record_id, generation, box, supplied_by, supplier_mac, created_at)
                VALUES (\(recordID), \(generation), \(box), \(suppliedBy), \(supplierMAC), \(now.databaseString))
                """)
            try database.execute("""
                UPDATE MailCredentials SET refused_at = NULL WHERE record_id = \(recordID) AND generation = \(generation) AND refused_at IS NOT NULL
                """)
        }
    }

    /// Makes fresh credentials current: the stored row re-sealed with them, and every
    /// fresh row up to the one taken erased, in one transaction. A refresh under way
    /// loses its claim and its fence (its answer is for the old credentials, and its
    /// late write must not replace these), and a refusal is forgotten. The credentials
    /// now in use are `fresh`'s supplier's (when it names one, as every row since
    /// migration 016 does): they go when it leaves. (A concurrent callback that took
    /// the same row first erased it: the supplier that one set stays.)
    public func adoptFreshCredentials(recordID: Int64, generation: Int64, sealed: [UInt8], fresh: FreshCredentials) throws(DatabaseError) {
        let throughFreshID = fresh.id
        try database.atomically { () throws(DatabaseError) in
            if let supplier = fresh.suppliedBy {
                let supplierMAC = binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: supplier)
                try database.execute("""
                    UPDATE MailCredentials SET supplied_by = \(supplier), supplier_mac = \(supplierMAC)
                    WHERE record_id = \(recordID) AND generation = \(generation)
                      AND EXISTS (SELECT 1 FROM MailCredentialsFresh f WHERE f.id = \(throughFreshID) AND f.record_id = \(recordID))
                    """)
            }
            try database.execute("""
                UPDATE MailCredentials SET sealed = \(sealed), refresh_claim = NULL, refresh_claim_until = NULL, refused_at = NULL,
                  refresh_fence = refresh_fence + 1
                WHERE record_id = \(recordID) AND generation = \(generation)
                """)
            try database.execute("""
                DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND generation = \(generation) AND id <= \(throughFreshID)
                """)
        }
    }

    // MARK: OAuth refresh, one at a time per subscription

    /// A claim on a subscription's refresh: its fence (`MailCredentials.refresh_fence`,
    /// which every claim and every adoption of fresh credentials raises, so a later
    /// claimant always holds a larger one) and how long it has left by the database's
    /// clock when it was read.
    public struct RefreshFence: Equatable, Sendable {
        public let value: Int64
        public let remaining: Duration

        public init(value: Int64, remaining: Duration) {
            self.value = value
            self.remaining = remaining
        }
    }

    /// What a callback that wants to renew the access token may do.
    public enum RefreshClaim: Equatable {
        /// Renew it; the fence goes with every later step of the claimant.
        case claimed(RefreshFence)
        /// Another callback (any responder, any host) is renewing it now.
        case heldElsewhere
        /// The token endpoint refused this subscription's refresh token; nothing is
        /// asked of it until new credentials arrive.
        case refused
        /// No stored credentials (a superseded subscription, a deleted record).
        case gone
    }

    /// Claims the subscription's refresh for `lifetime` (then a claimant that crashed
    /// no longer holds it). An UPDATE that matches only a free or expired claim, so two
    /// claimants on two Galera nodes cannot both win: one's write fails certification
    /// and, rerun, finds the claim taken.
    ///
    /// Expiry is judged by the database's clock, never a host's: two hosts whose clocks
    /// disagree, or one that paused, would otherwise each see the other's claim as
    /// expired. UTC_TIMESTAMP(3) rather than NOW(3), which follows the session's
    /// time_zone: a connection set up differently would read another hour. The claim raises the fence and reads it back with
    /// LAST_INSERT_ID(expr), which this connection alone sees, in the same statement.
    public func claimCredentialRefresh(recordID: Int64, generation: Int64, lifetime: Duration) throws(DatabaseError) -> RefreshClaim {
        let claim = randomBytes(16)
        let microseconds = Self.microseconds(lifetime)
        let claimed = try database.execute("""
            UPDATE MailCredentials SET refresh_claim = \(claim), refresh_fence = LAST_INSERT_ID(refresh_fence + 1),
              refresh_claim_until = UTC_TIMESTAMP(3) + INTERVAL \(microseconds) MICROSECOND
            WHERE record_id = \(recordID) AND generation = \(generation) AND refused_at IS NULL
              AND (refresh_claim IS NULL OR refresh_claim_until < UTC_TIMESTAMP(3))
            """)
        if claimed.affectedRows > 0 {
            return .claimed(RefreshFence(value: claimed.lastInsertID, remaining: lifetime))
        }
        guard let row = try database.queryOne("""
            SELECT refused_at IS NOT NULL FROM MailCredentials WHERE record_id = \(recordID) AND generation = \(generation)
            """) else { return .gone }
        return try row.decode(Bool.self) ? .refused : .heldElsewhere
    }

    /// The claim as it stands now: nil when `fence` no longer holds it (it expired by
    /// the database's clock, another claimant took over, fresh credentials were
    /// adopted), else its fence with the time it has left by the database's clock. A
    /// claimant asks this just before sending the refresh token, and sends it only with
    /// a deadline inside what is left.
    public func credentialRefreshClaim(recordID: Int64, generation: Int64, fence: RefreshFence) throws(DatabaseError) -> RefreshFence? {
        guard let row = try database.queryOne("""
            SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), refresh_claim_until) FROM MailCredentials
            WHERE record_id = \(recordID) AND generation = \(generation) AND refresh_fence = \(fence.value)
              AND refresh_claim IS NOT NULL AND refresh_claim_until > UTC_TIMESTAMP(3)
            """) else { return nil }
        let left = try row.decode(Int64.self)
        return RefreshFence(value: fence.value, remaining: .microseconds(left))
    }

    /// Whether another callback's claim is still held, by the database's clock.
    public func credentialRefreshUnderWay(recordID: Int64, generation: Int64) throws(DatabaseError) -> Bool {
        try database.queryOne("""
            SELECT 1 FROM MailCredentials WHERE record_id = \(recordID) AND generation = \(generation)
              AND refresh_claim IS NOT NULL AND refresh_claim_until >= UTC_TIMESTAMP(3)
            """) != nil
    }

    /// Stores the renewed credentials (re-sealed) and frees the claim, only while
    /// `fence` is still the latest: false when a later claimant or an adoption of
    /// fresh credentials came meanwhile (their credentials stay, and this claimant's
    /// must not be used). A claim past its expiry that nobody took over still writes:
    /// the rotated refresh token it carries is the only one that works now.
    public func finishCredentialRefresh(recordID: Int64, generation: Int64, fence: RefreshFence, sealed: [UInt8]) throws(DatabaseError) -> Bool {
        try database.execute("""
            UPDATE MailCredentials SET sealed = \(sealed), refresh_claim = NULL, refresh_claim_until = NULL
            WHERE record_id = \(recordID) AND generation = \(generation) AND refresh_fence = \(fence.value)
              AND refresh_claim IS NOT NULL
            """).affectedRows > 0
    }

    /// Frees the claim without new credentials, if `fence` still holds it; with
    /// `refusedAt`, the token endpoint refused the refresh token (`RefreshClaim.refused`
    /// from then on).
    public func abandonCredentialRefresh(recordID: Int64, generation: Int64, fence: RefreshFence, refusedAt: Timestamp?) throws(DatabaseError) {
        try database.execute("""
            UPDATE MailCredentials SET refresh_claim = NULL, refresh_claim_until = NULL, refused_at = \(refusedAt?.databaseString)
            WHERE record_id = \(recordID) AND generation = \(generation) AND refresh_fence = \(fence.value)
              AND refresh_claim IS NOT NULL
            """)
    }

    /// A duration in whole microseconds (at least 0), for `INTERVAL ... MICROSECOND`.
    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return max(0, seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    }

    // MARK: Callbacks

    public func callbackRecord(id: Int64) throws(DatabaseError) -> CallbackRecord? {
        try database.queryOne("SELECT \(unsafe: Self.callbackColumns) FROM EnsSubscriptionInfo WHERE id = \(id)").map(Self.callbackRecord)
    }

    /// The record a backend's subscription id belongs to (Graph's notifications name
    /// the subscription, not the record).
    public func callbackRecord(subscriptionID: String, backend: MailBackend) throws(DatabaseError) -> CallbackRecord? {
        try database.queryOne("""
            SELECT \(unsafe: Self.callbackColumns) FROM EnsSubscriptionInfo WHERE subscription_id = \(subscriptionID) AND mail_backend = \(backend)
            """).map(Self.callbackRecord)
    }

    /// The record a callback names and the devices `notifiableDevices` would give, in
    /// one round trip: a callback's only read. (Each statement costs MariaDB more than
    /// the rows it reads; bench/b6-floor.py measures it.)
    public func callbackRecordAndDevices(id: Int64, now: Timestamp,
                                         limit: Int) throws(DatabaseError) -> (record: CallbackRecord, devices: [NotifiableDevice])? {
        // Every enabled device of the record (devices.max_per_record keeps them few),
        // ordered here: an ORDER BY on the joined table would make MariaDB build a
        // temporary table for every callback.
        let rows = try database.query("""
            SELECT \(unsafe: Self.recordAndDeviceColumns), d.last_checkin_at FROM EnsSubscriptionInfo r
            LEFT JOIN Devices d FORCE INDEX (uq_device_token)
                ON d.subscription_row = r.id AND d.disabled_at IS NULL AND d.endpoint <=> r.endpoint
            WHERE r.id = \(id)
            """)
        guard let first = rows.first else { return nil }
        let split = Self.callbackColumnCount
        let record = try Self.callbackRecord(Row(values: Array(first.values[..<split])))
        // Without devices, the one row's device columns are all NULL.
        var found: [(id: Int64, checkIn: Timestamp, row: Row)] = []
        for row in rows where row.values[split] != .null {
            let device = Row(values: Array(row.values[split..<(row.values.count - 1)]))
            found.append((try device.int(0), try Row(values: [row.values[row.values.count - 1]]).decode(Timestamp.self), device))
        }
        // The most recently active first, as `notifiableDevices` orders them.
        found.sort { ($0.checkIn, $1.id) > ($1.checkIn, $0.id) }
        let recent = found.prefix(limit)
        let devices = try recent.compactMapTyped { row throws(DatabaseError) in try notifiableDevice(row.row, now: now) }
        return (record, devices)
    }

    /// Constants, so `unsafe:` splices no input into the SQL.
    private static let callbackColumns = callbackColumns(of: "EnsSubscriptionInfo")
    private static let recordAndDeviceColumns = callbackColumns(of: "r") + ", " + notifiableColumns(of: "d", epoch: "r.device_epoch")
    private static let callbackColumnCount = 20
    private static func callbackColumns(of table: String) -> String {
        let columns = """
            id, userid, generation, pending_generation, pending_started_at, mail_backend, subscription_id, watermark, backend_url, \
            backend_version, backend_tenant, endpoint, binding_mac, private_key_sealed, notify_count, notify_window_started_at, \
            claim_of, claim_endpoint, claim_mac
            """.split(separator: ",").map { "\(table).\($0.trimmingCharacters(in: " \n"))" }
        precondition(columns.count + 1 == callbackColumnCount, "callbackColumnCount counts every column callbackRecord decodes")
        return columns.joined(separator: ", ") + """
            , (SELECT c.sealed FROM MailCredentials c WHERE c.record_id = \(table).id AND c.generation = \(table).generation \
             AND NOT EXISTS (SELECT 1 FROM MailCredentialsFresh f WHERE f.record_id = c.record_id AND f.generation = c.generation))
            """
    }

    /// A rich (`blind`) subscription and its record in one round trip, for a POST to the
    /// subscription's own URL (`RoutingToken.blindID`).
    public func blindCallback(blindID: Int64) throws(DatabaseError) -> (record: CallbackRecord, blind: GraphBlindStore.BlindSubscription)? {
        guard let row = try database.queryOne("""
            SELECT \(unsafe: Self.callbackColumns), b.* FROM EnsSubscriptionInfo
            JOIN (SELECT \(unsafe: GraphBlindStore.aliasedColumns) FROM GraphBlindSubscriptions WHERE id = \(blindID)) b
                ON b.blind_record_id = EnsSubscriptionInfo.id
            """) else { return nil }
        let split = row.values.count - GraphBlindStore.columnCount
        guard let blind = try GraphBlindStore(database: database, vault: vault).subscription(from: Row(values: Array(row.values[split...]))) else {
            return nil
        }
        return (try Self.callbackRecord(Row(values: Array(row.values[..<split]))), blind)
    }

    private static func callbackRecord(_ row: Row) throws(DatabaseError) -> CallbackRecord {
        let (recordID, storedUserID, generation, pendingGeneration, pendingStartedAt, backend, subscriptionID, watermark, backendURL, backendVersion,
             backendTenant, endpoint, bindingMAC, keyMaterial, notifyCount, notifyWindowStartedAt)
            = try Row(values: Array(row.values[..<16])).decode(
                Int64.self, String.self, Int64.self, Int64.self, Timestamp?.self, MailBackend.self, String?.self, String?.self,
                String?.self, String?.self, String?.self, String?.self, [UInt8]?.self, [UInt8].self, Int64.self, Timestamp?.self)
        let (claimOf, claimEndpoint, claimMAC, liveCredentials)
            = try Row(values: Array(row.values[16..<20])).decode(String?.self, String?.self, [UInt8]?.self, [UInt8]?.self)
        return CallbackRecord(
            id: recordID, userID: claimOf ?? storedUserID, generation: generation, pendingGeneration: pendingGeneration,
            pendingStartedAt: pendingStartedAt, backend: backend, subscriptionID: subscriptionID, watermark: watermark, backendURL: backendURL,
            backendVersion: backendVersion, backendTenant: backendTenant, endpoint: endpoint, keyMaterial: keyMaterial,
            liveCredentials: liveCredentials, bindingMAC: bindingMAC, claim: claimOf.map { _ in (storedUserID, claimEndpoint, claimMAC) },
            notifyCount: notifyCount, notifyWindowStartedAt: notifyWindowStartedAt
        )
    }

    /// A callback was answered: the heartbeat the renewal job watches, and the newest
    /// watermark (kept so a re-subscription could resume from it).
    public func recordCallback(recordID: Int64, generation: Int64, watermark: String?, now: Timestamp) throws(DatabaseError) {
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET last_callback_at = \(now.databaseString),
                watermark = COALESCE(\(watermark), watermark)
            WHERE id = \(recordID) AND generation = \(generation)
            """)
    }

    /// The backend said the subscription is gone (EWS: e.g. ErrorReadEventsFailed): devices will
    /// hear UserRecordPresentNotSubscribed at their next check-in and register again.
    /// Its stored credentials are erased: nothing calls back with them any more.
    public func markUnsubscribed(recordID: Int64, generation: Int64) throws(DatabaseError) {
        try database.atomically { () throws(DatabaseError) in
            try CredentialErasure(database: database).endSubscription(recordID: recordID, generation: generation)
        }
    }

    /// A device a new-mail notification goes to: its settings, its push token opened
    /// from the sealed column, and its sync key while unexpired.
    public struct NotifiableDevice: Sendable {
        public let device: DeviceRecord
        public let token: DeviceToken
        public let syncKey: (key: String, expiresAt: Timestamp)?
    }

    /// The record's enabled devices (tokens APNs rejected are left out) that proved
    /// themselves at `endpoint`, the live subscription's server, at most `limit`, the
    /// most recently active first. A device bound to another server (a squatter's, or
    /// the one a mailbox moved away from) hears nothing from this one.
    public func notifiableDevices(recordID: Int64, endpoint: String?, now: Timestamp, limit: Int) throws(DatabaseError) -> [NotifiableDevice] {
        // The record's own rows, sorted after: with ORDER BY last_checkin_at ... LIMIT,
        // MariaDB may walk the whole ix_device_checkin index backwards instead.
        let rows = try database.query("""
            SELECT \(unsafe: Self.notifiableColumns) FROM Devices FORCE INDEX (uq_device_token)
            WHERE subscription_row = \(recordID) AND disabled_at IS NULL AND endpoint <=> \(endpoint) ORDER BY last_checkin_at DESC, id LIMIT \(limit)
            """)
        return try rows.compactMapTyped { row throws(DatabaseError) in try notifiableDevice(row, now: now) }
    }

    /// A device's columns and the sealed ones a push needs (constants: see `callbackColumns`).
    private static let notifiableColumns = notifiableColumns(of: "Devices")
    private static func notifiableColumns(of table: String, epoch: String? = nil) -> String {
        SubscriptionStore.deviceColumns(of: table, epoch: epoch) + ", \(table).token_sealed, \(table).sync_key_sealed, \(table).sync_key_expires_at"
    }

    /// A row of `notifiableColumns`; nil when its push token no longer opens, or when
    /// the row fails its MAC or its sealed token is another device's (logged).
    private func notifiableDevice(_ row: Row, now: Timestamp) throws(DatabaseError) -> NotifiableDevice? {
        let columns = SubscriptionStore.deviceColumnCount
        guard let device = try SubscriptionStore.device(from: Row(values: Array(row.values[..<columns])), binding: binding) else { return nil }
        let (tokenSealed, syncKeySealed, syncKeyExpiry) = try Row(values: Array(row.values[columns...]))
            .decode([UInt8].self, [UInt8]?.self, Timestamp?.self)
        guard let token = try SubscriptionStore.token(sealed: tokenSealed, of: device, vault: vault) else { return nil }
        var syncKey: (key: String, expiresAt: Timestamp)?
        if let sealed = syncKeySealed, let expiry = syncKeyExpiry, expiry > now {
            syncKey = (try storedValue("sync key") { try vault.openSyncKey(sealed, tokenHash: device.tokenHash) }, expiry)
        }
        return NotifiableDevice(device: device, token: token, syncKey: syncKey)
    }

    // MARK: Notification rate

    /// Reserves pushes against the record's per-minute cap: `preferring` if that many
    /// still fit in the current minute, else `orElse`, else nothing (nil). Each try is
    /// one conditional UPDATE (the row lock makes it atomic against other callbacks of
    /// the record), which also records the callback as heard (`recordCallback`'s work),
    /// so a callback with new mail writes the record once.
    public func reserveNotifications(recordID: Int64, preferring: Int, orElse: Int, limit: Int,
                                     watermark: String?, now: Timestamp) throws(DatabaseError) -> Int? {
        let windowStart = now.adding(seconds: -60).databaseString
        for wanted in [preferring, orElse] where wanted <= limit {
            // SET runs left to right: the count is computed while the window start is
            // still the old one.
            let reserved = try database.execute("""
                UPDATE EnsSubscriptionInfo SET
                    notify_count = IF(notify_window_started_at > \(windowStart), notify_count, 0) + \(wanted),
                    notify_window_started_at = IF(notify_window_started_at > \(windowStart), notify_window_started_at, \(now.databaseString)),
                    last_callback_at = \(now.databaseString), watermark = COALESCE(\(watermark), watermark)
                WHERE id = \(recordID) AND IF(notify_window_started_at > \(windowStart), notify_count, 0) + \(wanted) <= \(limit)
                """).affectedRows > 0
            if reserved { return wanted }
        }
        return nil
    }

    /// How many pushes the record may still make in its current minute, read without
    /// locking the row (a hint: `reserveNotifications` decides).
    public func notificationsLeft(recordID: Int64, limit: Int, now: Timestamp) throws(DatabaseError) -> Int {
        let windowStart = now.adding(seconds: -60).databaseString
        let used = try database.queryOne("""
            SELECT IF(notify_window_started_at > \(windowStart), notify_count, 0) FROM EnsSubscriptionInfo WHERE id = \(recordID)
            """)?.decode(Int.self) ?? 0
        return max(0, limit - used)
    }

    /// Gives back reserved pushes the sender did not take, so the mail server's
    /// redelivery after a 503 is not charged twice against the per-minute cap.
    public func returnNotifications(recordID: Int64, count: Int) throws(DatabaseError) {
        guard count > 0 else { return }
        try database.execute("""
            UPDATE EnsSubscriptionInfo SET notify_count = GREATEST(CAST(notify_count AS SIGNED) - \(count), 0) WHERE id = \(recordID)
            """)
    }
}
