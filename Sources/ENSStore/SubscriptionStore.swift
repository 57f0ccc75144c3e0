internal import Codecs
public import MariaDB
public import OpenSSL
public import ENSModel
public import ENSVault

/// The SQL behind the device API: user records and their devices. Every statement is
/// bound (`Query` interpolation); every lookup uses a key or an index.
public struct SubscriptionStore {
    public let database: any SQLDatabase
    public let vault: Vault
    public let keyCache: PrivateKeyCache?
    public let liveness: LivenessRecorder?
    /// Devices a record keeps (`devices.max_per_record`).
    public let maximumDevices: Int
    /// The shard `database` is (record ids are per shard: the key cache and the check-in
    /// recorder name both).
    public let shard: Int

    public init(database: any SQLDatabase, vault: Vault, keyCache: PrivateKeyCache? = nil, liveness: LivenessRecorder? = nil,
                maximumDevices: Int = 20, shard: Int = 0) {
        self.database = database
        self.shard = shard
        self.vault = vault
        self.keyCache = keyCache
        self.liveness = liveness
        self.maximumDevices = maximumDevices
    }

    // The key columns are left out: they are read only when a key is not in the cache.
    // Then whether the live subscription's refresh token was refused (a primary key
    // lookup, in the same round trip), and what names a claim (migration 024).
    private static let recordColumns = """
        s.id, COALESCE(s.claim_of, s.userid), s.registered, s.generation, s.mail_backend, s.subscription_id, \
        s.heartbeat_minutes, s.last_callback_at, \
        s.endpoint, EXISTS (SELECT 1 FROM MailCredentials c WHERE c.record_id = s.id AND c.generation = s.generation AND c.refused_at IS NOT NULL), \
        s.userid, s.claim_of, s.claim_endpoint, s.claim_mac
        """
    private static let recordColumnCount = 14

    /// The user's own record (not one of its claims).
    public func record(userID: String) throws(DatabaseError) -> UserRecord? {
        guard let row = try database.queryOne("""
            SELECT \(unsafe: Self.recordColumns) FROM EnsSubscriptionInfo s WHERE s.userid = \(userID) AND s.claim_of IS NULL
            """) else { return nil }
        return try record(from: row)
    }

    /// A UserRecord from a row of `recordColumns`; nil (and logged) for a claim whose
    /// `claim_mac` fails: a row a database writer made, or relabelled for another user
    /// or server, is no claim.
    private func record(from row: Row) throws(DatabaseError) -> UserRecord? {
        let (id, userID, registered, generation, backend, subscriptionID, heartbeatMinutes, lastCallbackAt, endpoint, credentialsRefused,
             placeholder, claimOf, claimEndpoint, claimMAC)
            = try row.decode(Int64.self, String.self, Bool.self, Int64.self, MailBackend.self, String?.self, Int64.self, Timestamp?.self,
                             String?.self, Bool.self, String.self, String?.self, String?.self, [UInt8]?.self)
        if let claimOf {
            guard let claimEndpoint,
                  RowBinding.matches(claimMAC, RowBinding(vault: vault).claim(userID: placeholder, claimOf: claimOf, endpoint: claimEndpoint)) else {
                RowIntegrity.refused("EnsSubscriptionInfo", row: "\(id)")
                return nil
            }
        }
        return UserRecord(id: id, userID: userID, registered: registered, generation: generation, backend: backend,
                          subscriptionID: subscriptionID, heartbeatMinutes: heartbeatMinutes, lastCallbackAt: lastCallbackAt,
                          endpoint: endpoint, credentialsRefused: credentialsRefused, isClaim: claimOf != nil)
    }

    /// Creates a record with `key`; if another request created it first, returns theirs.
    public func createRecord(userID: String, publicKeyPEM: String, key: RSAPrivateKey) throws(DatabaseError) -> UserRecord {
        do {
            try database.execute("""
                INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered)
                VALUES (\(userID), \(publicKeyPEM), \(try storedValue("user key") { try vault.sealUserKey(key, userID: userID) }), 0)
                """)
        } catch where error.kind == .duplicateKey {
            // A concurrent /getpublickey for the same user won; use its key.
        }
        guard let record = try record(userID: userID) else {
            throw DatabaseError.claimLost("user record vanished")
        }
        return record
    }

    /// The user's own record and its devices, in one round trip (check-ins are the
    /// hottest path). A device on one of the user's claims is found by
    /// `claimHolding(userID:tokenHash:)`.
    public func recordWithDevices(userID: String) throws(DatabaseError) -> (UserRecord, [DeviceRecord])? {
        let rows = try database.query("""
            SELECT \(unsafe: Self.recordColumns), \(unsafe: Self.recordDeviceColumns)
            FROM EnsSubscriptionInfo s LEFT JOIN Devices d ON d.subscription_row = s.id
            WHERE s.userid = \(userID) AND s.claim_of IS NULL LIMIT 1000
            """)
        guard let first = rows.first else { return nil }
        let recordColumns = Self.recordColumnCount
        guard let record = try record(from: Row(values: Array(first.values[..<recordColumns]))) else { return nil }
        let binding = RowBinding(vault: vault)
        let devices = try rows.compactMapTyped { row throws(DatabaseError) -> DeviceRecord? in
            guard try row.optionalInt(recordColumns) != nil else { return nil }
            return try Self.device(from: Row(values: Array(row.values[recordColumns...])), binding: binding)
        }
        return (record, devices)
    }

    /// The claim of `userID` (migration 024) that holds the device with `tokenHash`, with
    /// that device; nil when none does.
    public func claimHolding(userID: String, tokenHash: [UInt8]) throws(DatabaseError) -> (UserRecord, DeviceRecord)? {
        let rows = try database.query("""
            SELECT \(unsafe: Self.recordColumns), \(unsafe: Self.recordDeviceColumns)
            FROM EnsSubscriptionInfo s JOIN Devices d ON d.subscription_row = s.id
            WHERE s.claim_of = \(userID) AND d.token_hash = \(tokenHash)
            """)
        let recordColumns = Self.recordColumnCount
        let binding = RowBinding(vault: vault)
        for row in rows {
            guard let record = try record(from: Row(values: Array(row.values[..<recordColumns]))),
                  let device = try Self.device(from: Row(values: Array(row.values[recordColumns...])), binding: binding) else { continue }
            return (record, device)
        }
        return nil
    }
    private static let recordDeviceColumns = deviceColumns(of: "d", epoch: "s.device_epoch")

    /// The user's claim at `endpoint` (migration 024), made now if it has none: a record
    /// row beside `own`, the user's own record, that shares its key. (Two registrations
    /// making the same claim at once make one: the unique key on claim_of and
    /// claim_endpoint keeps the first.)
    public func claim(of own: UserRecord, endpoint: String) throws(DatabaseError) -> UserRecord {
        precondition(!own.isClaim, "a claim is made beside the user's own record, never beside another claim")
        if let existing = try claimRow(of: own.userID, endpoint: endpoint) { return existing }
        guard let sealedKey = try database.queryOne("SELECT private_key_sealed FROM EnsSubscriptionInfo WHERE id = \(own.id)")?.decode([UInt8].self)
        else { throw DatabaseError.claimLost("user record vanished") }
        let placeholder = Hex.encode(randomBytes(32))
        let mac = RowBinding(vault: vault).claim(userID: placeholder, claimOf: own.userID, endpoint: endpoint)
        do {
            try database.execute("""
                INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, claim_of, claim_endpoint, claim_mac)
                VALUES (\(placeholder), '', \(sealedKey), 0, \(own.userID), \(endpoint), \(mac))
                """)
        } catch {
            // A concurrent registration made it first: use theirs.
            guard error.kind == .duplicateKey else { throw error }
        }
        guard let made = try claimRow(of: own.userID, endpoint: endpoint) else { throw DatabaseError.claimLost("user record vanished") }
        return made
    }

    private func claimRow(of userID: String, endpoint: String) throws(DatabaseError) -> UserRecord? {
        try database.queryOne("""
            SELECT \(unsafe: Self.recordColumns) FROM EnsSubscriptionInfo s WHERE s.claim_of = \(userID) AND s.claim_endpoint = \(endpoint)
            """).flatMap { row throws(DatabaseError) in try record(from: row) }
    }

    /// The record's private key, from the cache or opened from its sealed form. The
    /// cache is keyed by shard and record id: ids are never reused, so they name one key forever.
    public func privateKey(of record: UserRecord) throws(DatabaseError) -> RSAPrivateKey {
        let open = { () throws(DatabaseError) -> RSAPrivateKey in
            guard let row = try database.queryOne("SELECT private_key_sealed FROM EnsSubscriptionInfo WHERE id = \(record.id)") else {
                throw DatabaseError.claimLost("user record vanished")
            }
            let sealed = try row.decode([UInt8].self)
            return try storedValue("user key") { try vault.openUserKey(sealed, userID: record.userID) }
        }
        guard let keyCache else { return try open() }
        return try keyCache.key(recordID: record.id, shard: shard, open: open)
    }

    /// The public half of the record's key, made from the sealed private key (which
    /// only the master key opens, bound to the userid). The stored `public_key_pem` is
    /// not read: a database writer could replace it with a key of their own so that
    /// devices seal credentials to them. (It is still written, for older binaries.)
    public func publicKeyPEM(of record: UserRecord) throws(DatabaseError) -> String {
        let key = try privateKey(of: record)
        return try storedValue("user key's public half") { try key.publicKeyPEM }
    }

    public func deleteRecord(id: Int64) throws(DatabaseError) {
        try database.execute("DELETE FROM EnsSubscriptionInfo WHERE id = \(id)")
    }

    // MARK: Devices

    /// A device's columns, then its record's device epoch (the freshness counter its MAC
    /// covers): `epoch` names it where the record's row is joined, else a subquery reads it.
    static func deviceColumns(of table: String, epoch: String? = nil) -> String {
        let columns = """
            id, token_hash, bundle_id, default_sound, ews_device_id, badge, development, disabled_at, last_notified_at, privacy_mode, preview_key, \
            endpoint, secret_hash, subscription_row, binding_mac
            """.split(separator: ",").map { "\(table).\($0.trimmingCharacters(in: " \n"))" }
        precondition(columns.count + 1 == deviceColumnCount, "deviceColumnCount counts every column device(from:binding:) decodes")
        let epoch = epoch ?? "(SELECT e.device_epoch FROM EnsSubscriptionInfo e WHERE e.id = \(table).subscription_row)"
        return (columns + [epoch]).joined(separator: ", ")
    }
    static let deviceColumns = deviceColumns(of: "Devices")
    static let deviceColumnCount = 16

    public func device(recordID: Int64, token: DeviceToken, forUpdate: Bool = false) throws(DatabaseError) -> DeviceRecord? {
        let hash = vault.tokenHash(token)
        let query: Query = forUpdate
            ? "SELECT \(unsafe: Self.deviceColumns) FROM Devices WHERE subscription_row = \(recordID) AND token_hash = \(hash) FOR UPDATE"
            : "SELECT \(unsafe: Self.deviceColumns) FROM Devices WHERE subscription_row = \(recordID) AND token_hash = \(hash)"
        return try database.queryOne(query).flatMap { row throws(DatabaseError) in try Self.device(from: row, binding: RowBinding(vault: vault)) }
    }

    public func devices(recordID: Int64) throws(DatabaseError) -> [DeviceRecord] {
        let binding = RowBinding(vault: vault)
        return try database.query("SELECT \(unsafe: Self.deviceColumns) FROM Devices WHERE subscription_row = \(recordID) ORDER BY id LIMIT 1000")
            .compactMapTyped { row throws(DatabaseError) in try Self.device(from: row, binding: binding) }
    }

    /// A DeviceRecord from a row of exactly `deviceColumns`; nil (and logged) when the
    /// row fails its `RowBinding` MAC: a device a database writer made, copied to
    /// another record, or gave another device's token or secret, another mode, key or
    /// server, is no device at all.
    static func device(from row: Row, binding: RowBinding) throws(DatabaseError) -> DeviceRecord? {
        let (id, tokenHash, bundleID, defaultSound, ewsDeviceID, badge, development,
             disabledAt, lastNotifiedAt, mode, previewKey, endpoint, secretHash)
            = try Row(values: Array(row.values[..<13]))
                .decode(Int64.self, [UInt8].self, String.self, String?.self, String?.self, Bool.self, Bool.self,
                        Timestamp?.self, Timestamp?.self, Int64.self, [UInt8]?.self, String?.self, [UInt8]?.self)
        let (recordID, mac, epoch) = try Row(values: Array(row.values[13...])).decode(Int64.self, [UInt8]?.self, Int64?.self)
        // No epoch: the record is gone (a row of a deleted record is no device either).
        guard let epoch else { return nil }
        let expected = binding.device(id: id, recordID: recordID, tokenHash: tokenHash, bundleID: bundleID, privacyMode: Int(mode),
                                      previewKey: previewKey, endpoint: endpoint, secretHash: secretHash, epoch: epoch)
        guard RowBinding.matches(mac, expected) else {
            RowIntegrity.refused("Devices", row: "\(id)")
            return nil
        }
        // A mode this binary does not know (a newer one's) is treated as the strictest.
        let privacy = DevicePrivacy(mode: PrivacyMode(rawValue: Int(mode)) ?? .secure, previewKey: previewKey)
        return DeviceRecord(id: id, tokenHash: tokenHash, bundleID: bundleID, defaultSound: defaultSound, ewsDeviceID: ewsDeviceID,
                            badge: badge, development: development, disabledAt: disabledAt, lastNotifiedAt: lastNotifiedAt, privacy: privacy,
                            endpoint: endpoint, secretHash: secretHash)
    }

    /// Runs a change to the record's devices (a row added, changed or removed) inside
    /// the caller's transaction, as the freshness counter asks: `body` gets the record's
    /// device epoch to bind the row it writes with; then the epoch advances and every
    /// device of the record that holds under the old one is bound anew under the next.
    /// A row that failed its MAC stays failing (it is not bound anew: that would bless a
    /// writer's edit), and an older copy of any row, restored alone, now fails too.
    func changingDevices<T>(recordID: Int64, _ body: (_ epoch: Int64) throws(DatabaseError) -> T) throws(DatabaseError) -> T {
        try database.atomically { () throws(DatabaseError) in
            guard let epoch = try database.queryOne("SELECT device_epoch FROM EnsSubscriptionInfo WHERE id = \(recordID) FOR UPDATE")?
                .decode(Int64.self) else { throw DatabaseError.claimLost("user record vanished") }
            let result = try body(epoch)
            let next = epoch + 1
            for device in try devices(recordID: recordID) {
                try database.execute("""
                    UPDATE Devices SET binding_mac = \(bindingMAC(of: device, recordID: recordID, epoch: next)) WHERE id = \(device.id)
                    """)
            }
            try database.execute("UPDATE EnsSubscriptionInfo SET device_epoch = \(next) WHERE id = \(recordID)")
            return result
        }
    }

    /// A device row's sealed push token, opened, if it is that row's own: its keyed
    /// hash must be the row's (MAC-bound) token hash, so a sealed token a database
    /// writer copied in from another row pushes nothing (logged). Nil when it does not
    /// open or is not the row's.
    static func token(sealed: [UInt8], of device: DeviceRecord, vault: Vault) throws(DatabaseError) -> DeviceToken? {
        guard let token = try storedValue("device token", { try vault.openToken(sealed) }) else { return nil }
        guard Digest.constantTimeEqual(vault.tokenHash(token), device.tokenHash) else {
            RowIntegrity.refused("Devices", row: "\(device.id)")
            return nil
        }
        return token
    }

    public enum RegistrationOutcome: Sendable, Equatable {
        /// The device was there with the same settings (and enabled).
        case unchanged
        /// The device was added, re-enabled or its settings changed.
        case addedOrUpdated
    }

    /// Adds the device or brings its settings up to date, idempotently: the unique key
    /// (record, token hash) and a single INSERT ... ON DUPLICATE KEY UPDATE mean that
    /// concurrent registrations of one token make one row, without locking a gap.
    /// A registration re-enables a token the sender disabled (it happens after it), and
    /// binds the device to `endpoint`, the server it just proved itself at.
    public func register(recordID: Int64, token: DeviceToken, settings: DeviceSettings,
                         endpoint: String, now: Timestamp) throws(DatabaseError) -> RegistrationOutcome {
        let existing = try device(recordID: recordID, token: token)
        let badge = settings.badge ?? existing?.badge ?? false
        let development = settings.development ?? existing?.development ?? false
        let privacy = settings.privacy ?? existing?.privacy ?? .preview
        let secretHash = settings.secretHash ?? existing?.secretHash
        if let existing, existing.disabledAt == nil, existing.bundleID == settings.bundleID,
           existing.defaultSound == settings.defaultSound, existing.ewsDeviceID == settings.ewsDeviceID,
           existing.badge == badge, existing.development == development, existing.privacy == privacy, existing.endpoint == endpoint,
           existing.secretHash == secretHash {
            try database.execute("UPDATE Devices SET last_checkin_at = \(now.databaseString) WHERE id = \(existing.id)")
            return .unchanged
        }
        let tokenSealed = try storedValue("device token") { try vault.sealToken(token) }
        // One transaction: the device and the eviction it may cause are applied together
        // or not at all, and a conflict with another host's write (Galera) reruns both.
        try changingDevices(recordID: recordID) { epoch throws(DatabaseError) in
            try database.execute("""
                INSERT INTO Devices (subscription_row, token_hash, token_sealed, bundle_id, default_sound, ews_device_id,
                                     badge, development, privacy_mode, preview_key, endpoint, secret_hash,
                                     registered_at, disabled_at, last_checkin_at)
                VALUES (\(recordID), \(vault.tokenHash(token)), \(tokenSealed), \(settings.bundleID),
                        \(settings.defaultSound), \(settings.ewsDeviceID), \(badge), \(development),
                        \(privacy.mode.rawValue), \(privacy.previewKey), \(endpoint), \(secretHash),
                        \(now.databaseString), NULL, \(now.databaseString))
                ON DUPLICATE KEY UPDATE token_sealed = VALUES(token_sealed), bundle_id = VALUES(bundle_id), default_sound = VALUES(default_sound),
                    ews_device_id = VALUES(ews_device_id), badge = VALUES(badge), development = VALUES(development),
                    privacy_mode = VALUES(privacy_mode), preview_key = VALUES(preview_key), endpoint = VALUES(endpoint),
                    secret_hash = VALUES(secret_hash),
                    registered_at = VALUES(registered_at), disabled_at = NULL, last_checkin_at = VALUES(last_checkin_at)
                """)
            // The row's id is known only now (a new row's, or the one the key matched).
            let tokenHash = vault.tokenHash(token)
            guard let id = try database.queryOne("SELECT id FROM Devices WHERE subscription_row = \(recordID) AND token_hash = \(tokenHash)")?
                .decode(Int64.self) else { throw DatabaseError.claimLost("user record vanished") }
            let mac = RowBinding(vault: vault).device(id: id, recordID: recordID, tokenHash: tokenHash, bundleID: settings.bundleID,
                                                      privacyMode: privacy.mode.rawValue, previewKey: privacy.previewKey, endpoint: endpoint,
                                                      secretHash: secretHash, epoch: epoch)
            try database.execute("UPDATE Devices SET binding_mac = \(mac) WHERE id = \(id)")
            try evictBeyondDeviceLimit(recordID: recordID, keeping: tokenHash)
        }
        return .addedOrUpdated
    }

    /// The `RowBinding` MAC of `device`'s row on `recordID` at the record's device
    /// `epoch`, with a new token hash or privacy, as a statement that changes them writes it.
    func bindingMAC(of device: DeviceRecord, recordID: Int64, tokenHash: [UInt8]? = nil, privacy: DevicePrivacy? = nil, epoch: Int64) -> [UInt8] {
        let privacy = privacy ?? device.privacy
        return RowBinding(vault: vault).device(id: device.id, recordID: recordID, tokenHash: tokenHash ?? device.tokenHash, bundleID: device.bundleID,
                                               privacyMode: privacy.mode.rawValue, previewKey: privacy.previewKey, endpoint: device.endpoint,
                                               secretHash: device.secretHash, epoch: epoch)
    }

    /// Keeps a record at `maximumDevices`: beyond it, devices whose token APNs rejected
    /// go first, then the least recently active (never the one just registered), so one
    /// user cannot fan a callback out without bound while a new phone still registers
    /// when old ones were never unregistered. An evicted device takes the credentials it
    /// supplied with it, as an unregistered one does.
    private func evictBeyondDeviceLimit(recordID: Int64, keeping tokenHash: [UInt8]) throws(DatabaseError) {
        let devices = try database.query("""
            SELECT id, token_hash FROM Devices WHERE subscription_row = \(recordID)
            ORDER BY disabled_at IS NULL DESC, last_checkin_at DESC, id DESC
            """)
        guard devices.count > maximumDevices else { return }
        let others = try devices.map { row throws(DatabaseError) in try row.decode(Int64.self, [UInt8].self) }
            .filter { !Digest.constantTimeEqual($0.1, tokenHash) }
        for (id, evicted) in others.dropFirst(maximumDevices - 1) {
            try database.execute("DELETE FROM Devices WHERE id = \(id)")
            try CredentialErasure(database: database).deviceLeft(recordID: recordID, tokenHash: evicted, binding: RowBinding(vault: vault))
        }
    }

    /// Refreshes the `badge`/`development` flags a later request carried.
    public func refreshFlags(deviceID: Int64, badge: Bool?, development: Bool?) throws(DatabaseError) {
        if let badge { try database.execute("UPDATE Devices SET badge = \(badge) WHERE id = \(deviceID)") }
        if let development { try database.execute("UPDATE Devices SET development = \(development) WHERE id = \(deviceID)") }
    }

    /// Removes a device; deletes the record when it was the last one. Returns whether
    /// the record was deleted. Credentials the device supplied go with it, in the same
    /// transaction (`CredentialErasure.deviceLeft`: a live subscription running on them
    /// ends, and the other devices are told to register again).
    @discardableResult
    public func unregister(recordID: Int64, token: DeviceToken) throws(DatabaseError) -> Bool {
        let tokenHash = vault.tokenHash(token)
        return try changingDevices(recordID: recordID) { _ throws(DatabaseError) in
            try database.execute("DELETE FROM Devices WHERE subscription_row = \(recordID) AND token_hash = \(tokenHash)")
            // The user's own record stays while a claim beside it has devices: the claims
            // share its key, which the user's devices seal with.
            let remaining = try database.queryOne("""
                SELECT (SELECT COUNT(*) FROM Devices WHERE subscription_row = \(recordID))
                     + (SELECT COUNT(*) FROM EnsSubscriptionInfo s JOIN EnsSubscriptionInfo c ON c.claim_of = s.userid AND s.claim_of IS NULL
                        WHERE s.id = \(recordID))
                """)?.decode(Int.self) ?? 0
            if remaining == 0 {
                try database.execute("DELETE FROM EnsSubscriptionInfo WHERE id = \(recordID)")
                return true
            }
            try CredentialErasure(database: database).deviceLeft(recordID: recordID, tokenHash: tokenHash, binding: RowBinding(vault: vault))
            return false
        }
    }

    /// Replaces `old` by `new` on the device's own row, so everything the device has
    /// stays with it: settings, privacy mode and preview key, the server it is bound to,
    /// its unfetched secure content and history (sealed to the row's id), its sync key,
    /// and the credentials it supplied (the push service gave the same device a new
    /// token: nobody left). A row `new` already had (registered on its own meanwhile) is
    /// dropped with its notifications; what it supplied is the same device's and stays.
    /// False when `old` is unknown.
    public func replaceToken(recordID: Int64, old: DeviceToken, new: DeviceToken, now: Timestamp) throws(DatabaseError) -> Bool {
        try changingDevices(recordID: recordID) { epoch throws(DatabaseError) in
            guard let oldDevice = try device(recordID: recordID, token: old, forUpdate: true) else { return false }
            if old == new { return true }
            // The sync key is sealed bound to the token's hash: it moves with the device,
            // sealed anew to the new token's (an unexpired one only; one that no longer
            // opens is dropped rather than left to fail every callback).
            let newHash = vault.tokenHash(new)
            var syncKey: (sealed: [UInt8], expiresAt: String)?
            if let row = try database.queryOne("""
                SELECT sync_key_sealed, sync_key_expires_at FROM Devices
                WHERE id = \(oldDevice.id) AND sync_key_sealed IS NOT NULL AND sync_key_expires_at > \(now.databaseString)
                """) {
                let (sealed, expiresAt) = try row.decode([UInt8].self, String.self)
                if let key = try? vault.openSyncKey(sealed, tokenHash: oldDevice.tokenHash) {
                    syncKey = (try storedValue("sync key") { try vault.sealSyncKey(key, tokenHash: newHash) }, expiresAt)
                }
            }
            if let newDevice = try device(recordID: recordID, token: new, forUpdate: true) {
                try database.execute("DELETE FROM Devices WHERE id = \(newDevice.id)")
            }
            try database.execute("""
                UPDATE Devices SET token_hash = \(newHash), token_sealed = \(try storedValue("device token") { try vault.sealToken(new) }),
                    binding_mac = \(bindingMAC(of: oldDevice, recordID: recordID, tokenHash: newHash, epoch: epoch)),
                    registered_at = \(now.databaseString), disabled_at = NULL, last_checkin_at = \(now.databaseString),
                    sync_key_sealed = \(syncKey?.sealed), sync_key_expires_at = \(syncKey?.expiresAt)
                WHERE id = \(oldDevice.id)
                """)
            // What it supplied follows it, each with its supplier's MAC anew (a row whose
            // MAC failed stays failing, and goes when a device of the record leaves).
            let binding = RowBinding(vault: vault)
            for row in try database.query("""
                SELECT generation, supplier_mac FROM MailCredentials WHERE record_id = \(recordID) AND supplied_by = \(oldDevice.tokenHash)
                """) {
                let (generation, mac) = try row.decode(Int64.self, [UInt8]?.self)
                guard RowBinding.matches(mac, binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: oldDevice.tokenHash))
                else { continue }
                try database.execute("""
                    UPDATE MailCredentials SET supplied_by = \(newHash),
                        supplier_mac = \(binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: newHash))
                    WHERE record_id = \(recordID) AND generation = \(generation)
                    """)
            }
            for row in try database.query("""
                SELECT id, generation, box, supplier_mac FROM MailCredentialsFresh
                WHERE record_id = \(recordID) AND supplied_by = \(oldDevice.tokenHash)
                """) {
                let (id, generation, box, mac) = try row.decode(Int64.self, Int64.self, [UInt8].self, [UInt8]?.self)
                guard RowBinding.matches(mac, binding.freshSupplier(recordID: recordID, generation: generation,
                                                                    suppliedBy: oldDevice.tokenHash, box: box))
                else { continue }
                try database.execute("""
                    UPDATE MailCredentialsFresh SET supplied_by = \(newHash),
                        supplier_mac = \(binding.freshSupplier(recordID: recordID, generation: generation, suppliedBy: newHash, box: box))
                    WHERE id = \(id)
                    """)
            }
            return true
        }
    }

    // MARK: Quota

    /// Counts one new record against the token's hourly quota; false (nothing counted)
    /// when the hour's quota is used up. One locked read and write: the responders are
    /// several processes.
    public func takeRecordQuota(tokenHash: [UInt8], limit: Int, now: Timestamp) throws(DatabaseError) -> Bool {
        try database.atomically { () throws(DatabaseError) in
            let row = try database.queryOne("SELECT window_started_at, created FROM RecordQuota WHERE token_hash = \(tokenHash) FOR UPDATE")
            let (started, created) = try row.map { row throws(DatabaseError) in try row.decode(Timestamp.self, Int.self) } ?? (now, 0)
            let windowOpen = started.adding(seconds: 3600) > now
            let used = windowOpen ? created : 0
            guard used < limit else { return false }
            try database.execute("""
                INSERT INTO RecordQuota (token_hash, window_started_at, created) VALUES (\(tokenHash), \(now.databaseString), 1)
                ON DUPLICATE KEY UPDATE window_started_at = \((windowOpen ? started : now).databaseString), created = \(used + 1)
                """)
            return true
        }
    }

    /// Gives back one creation `takeRecordQuota` counted that made no record (the key
    /// pool was empty, or the insert failed). Without it, devices retrying through a key
    /// pool outage would use up their application's hour, and new users would be turned
    /// away with 429 for up to an hour after the pool had refilled.
    public func returnRecordQuota(tokenHash: [UInt8]) throws(DatabaseError) {
        try database.execute("UPDATE RecordQuota SET created = created - 1 WHERE token_hash = \(tokenHash) AND created > 0")
    }

    // MARK: Check-ins and sync keys

    /// v1 check-in: the user is alive, and so are its devices that have no secret (the
    /// original contract's clients, which have no other check-in). It names no device
    /// and proves nothing, so it keeps no device with a secret from being reaped: those
    /// check in with v2. Nor does it keep a record without such a device (an empty one
    /// `/getpublickey` made): anyone with the ApiToken could otherwise keep every record
    /// they created from `reap.empty_record_days`. Coalesced through the check-in
    /// recorder when there is one.
    public func checkIn(recordID: Int64, now: Timestamp) throws(DatabaseError) {
        if let liveness {
            liveness.user(recordID, shard: shard)
            return
        }
        let time = now.databaseString
        try database.execute("""
            UPDATE EnsSubscriptionInfo s JOIN Devices d ON d.subscription_row = s.id AND d.secret_hash IS NULL
            SET s.last_checkin_at = \(time), d.last_checkin_at = \(time) WHERE s.id = \(recordID)
            """)
    }

    /// v2 check-in: this device is alive (reaping works per device; a record lives as
    /// long as it has devices).
    public func checkIn(deviceID: Int64, now: Timestamp) throws(DatabaseError) {
        if let liveness {
            liveness.device(deviceID, shard: shard)
            return
        }
        try database.execute("UPDATE Devices SET last_checkin_at = \(now.databaseString) WHERE id = \(deviceID)")
    }

    /// Changes the device's privacy mode (/updateprivacy), with its row's MAC.
    public func setPrivacy(_ device: DeviceRecord, recordID: Int64, _ privacy: DevicePrivacy) throws(DatabaseError) {
        _ = try changingDevices(recordID: recordID) { epoch throws(DatabaseError) in
            try database.execute("""
                UPDATE Devices SET privacy_mode = \(privacy.mode.rawValue), preview_key = \(privacy.previewKey),
                    binding_mac = \(bindingMAC(of: device, recordID: recordID, privacy: privacy, epoch: epoch))
                WHERE id = \(device.id)
                """)
        }
    }

    public func storeSyncKey(deviceID: Int64, tokenHash: [UInt8], syncKey: String, expiresAt: Timestamp) throws(DatabaseError) {
        try database.execute("""
            UPDATE Devices SET sync_key_sealed = \(try storedValue("sync key") { try vault.sealSyncKey(syncKey, tokenHash: tokenHash) }),
                sync_key_expires_at = \(expiresAt.databaseString)
            WHERE id = \(deviceID)
            """)
    }

    /// The device's sync key while unexpired; nil once past its expiry.
    public func syncKey(deviceID: Int64, now: Timestamp) throws(DatabaseError) -> (key: String, expiresAt: Timestamp)? {
        guard let row = try database.queryOne("""
            SELECT token_hash, sync_key_sealed, sync_key_expires_at FROM Devices
            WHERE id = \(deviceID) AND sync_key_sealed IS NOT NULL AND sync_key_expires_at > \(now.databaseString)
            """) else { return nil }
        let (tokenHash, sealed, expiry) = try row.decode([UInt8].self, [UInt8].self, Timestamp.self)
        return (try storedValue("sync key") { try vault.openSyncKey(sealed, tokenHash: tokenHash) }, expiry)
    }
}
