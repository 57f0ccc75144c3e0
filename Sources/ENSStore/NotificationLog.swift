internal import Codecs
public import MariaDB
public import ENSModel
public import ENSVault

/// The notifications made for each device (the NotificationLog table, migration 007):
/// when each was made, its history entry (sender and subject, sealed) while history is
/// on, and for `secure` devices the content they fetch once. Rows go with their device
/// (a cascade), and `ens-cron reap` trims them (Maintenance.reap).
public struct NotificationLog {
    let database: any SQLDatabase
    let vault: Vault

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        self.vault = vault
    }

    /// One notification as a responder logs it before handing it to the sender.
    public struct Entry: Sendable {
        public let notificationID: String
        public let deviceID: Int64
        public let createdAt: Timestamp
        /// The history entry ({"sender", "subject"} JSON); nil when history is off.
        public let summary: [UInt8]?
        /// What a `secure` device fetches (MailPayload.content); nil in other modes.
        public let content: [UInt8]?
        public let contentExpiresAt: Timestamp?

        public init(notificationID: String, deviceID: Int64, createdAt: Timestamp, summary: [UInt8]?,
                    content: [UInt8]?, contentExpiresAt: Timestamp?) {
            self.notificationID = notificationID
            self.deviceID = deviceID
            self.createdAt = createdAt
            self.summary = summary
            self.content = content
            self.contentExpiresAt = contentExpiresAt
        }
    }

    /// A row as the table holds it, sealed: what `record` writes, and what the sender
    /// writes for a responder that left the row to it (PushNotification.logRow).
    public struct SealedRow: Sendable {
        public let id: [UInt8]
        public let deviceID: Int64
        public let createdAt: Timestamp
        public let summary: [UInt8]?
        public let content: [UInt8]?
        public let contentExpiresAt: Timestamp?

        public init(id: [UInt8], deviceID: Int64, createdAt: Timestamp, summary: [UInt8]?, content: [UInt8]? = nil,
                    contentExpiresAt: Timestamp? = nil) {
            self.id = id
            self.deviceID = deviceID
            self.createdAt = createdAt
            self.summary = summary
            self.content = content
            self.contentExpiresAt = contentExpiresAt
        }
    }

    /// Logs notifications (each sealed here), all in one statement.
    public func record(_ entries: [Entry]) throws(DatabaseError) {
        let rows = try entries.compactMapTyped { entry throws(DatabaseError) -> SealedRow? in
            guard let id = Self.binaryID(entry.notificationID) else { return nil }
            let summary = try entry.summary.map { summary throws(DatabaseError) in
                try sealSummary(summary, notificationID: entry.notificationID, deviceID: entry.deviceID)
            }
            let content = try entry.content.map { content throws(DatabaseError) in
                try storedValue("log content") { try vault.sealLogEntry(content, part: .content, notificationID: id, deviceID: entry.deviceID) }
            }
            return SealedRow(id: id, deviceID: entry.deviceID, createdAt: entry.createdAt, summary: summary, content: content,
                             contentExpiresAt: entry.contentExpiresAt)
        }
        try Self.insert(rows, into: database)
    }

    /// A history entry sealed as `summary_sealed` holds it, bound to its notification
    /// and device: for a row the sender writes (PushNotification.logRow).
    public func sealSummary(_ summary: [UInt8], notificationID: String, deviceID: Int64) throws(DatabaseError) -> [UInt8] {
        guard let id = Self.binaryID(notificationID) else {
            preconditionFailure("a notification id is 32 hex characters (made by the responder)")
        }
        return try storedValue("log summary") { try vault.sealLogEntry(summary, part: .summary, notificationID: id, deviceID: deviceID) }
    }

    /// Writes sealed rows, at most `rowsPerStatement` a statement. A redelivered batch
    /// makes the same ids: the first row stays (its content may already have been
    /// fetched and erased, and must stay erased). IGNORE also skips a row whose device
    /// is gone (the foreign key): the sender writes its rows up to a quarter of a second
    /// after the responder made them, and an unregistration in between leaves the row
    /// nowhere to go, which must not fail the rows beside it.
    public static func insert(_ rows: [SealedRow], into database: any SQLDatabase) throws(DatabaseError) {
        // Each row count is a statement of its own in the connection's cache and the
        // server's, so their number stays small. No retry of its own: inside a hand-off
        // transaction a conflict rolls the whole transaction back, which only the
        // transaction may retry.
        for start in stride(from: 0, to: rows.count, by: Self.rowsPerStatement) {
            let values = rows[start..<min(start + Self.rowsPerStatement, rows.count)].map { row in
                [row.id.sqlValue, row.deviceID.sqlValue, row.createdAt.databaseString.sqlValue, row.summary.sqlValue, row.content.sqlValue,
                 row.contentExpiresAt?.databaseString.sqlValue ?? .null]
            }
            try database.execute("""
                INSERT IGNORE INTO NotificationLog (id, device_id, created_at, summary_sealed, content_sealed, content_expires_at)
                VALUES \(rows: values)
                """)
        }
    }

    static let rowsPerStatement = 8

    /// The content of one of the device's `secure` notifications, erased as it is
    /// read: nil when there is none (another device's, never made, already fetched,
    /// expired), and the caller answers all of these alike.
    public func takeContent(notificationID: String, deviceID: Int64, now: Timestamp) throws(DatabaseError) -> [UInt8]? {
        guard let id = Self.binaryID(notificationID) else { return nil }
        return try database.atomically { () throws(DatabaseError) -> [UInt8]? in
            guard let row = try database.queryOne("""
                SELECT content_sealed FROM NotificationLog
                WHERE id = \(id) AND device_id = \(deviceID) AND content_sealed IS NOT NULL
                  AND content_expires_at > \(now.databaseString)
                FOR UPDATE
                """) else { return nil }
            let sealed = try row.blob(0)
            try database.execute("UPDATE NotificationLog SET content_sealed = NULL, content_expires_at = NULL WHERE id = \(id)")
            // Sealed to its notification and device: a row moved to another device (or
            // given another id) does not open, and is no content (logged).
            guard let content = try? vault.openLogEntry(sealed, part: .content, notificationID: id, deviceID: deviceID) else {
                RowIntegrity.refused("NotificationLog", row: Hex.encode(id))
                return nil
            }
            return content
        }
    }

    public struct HistoryEntry: Sendable, Equatable {
        public let notificationID: String
        public let createdAt: Timestamp
        /// {"sender", "subject"} as logged.
        public let summary: [UInt8]
        public let readAt: Timestamp?
    }

    /// The device's newest history entries, newest first, none older than `since`.
    public func history(deviceID: Int64, limit: Int, since: Timestamp) throws(DatabaseError) -> [HistoryEntry] {
        guard limit > 0 else { return [] }
        return try database.query("""
            SELECT id, created_at, summary_sealed, read_at FROM NotificationLog FORCE INDEX (ix_log_device)
            WHERE device_id = \(deviceID) AND created_at >= \(since.databaseString) AND summary_sealed IS NOT NULL
            ORDER BY created_at DESC, id LIMIT \(limit)
            """).compactMapTyped { row throws(DatabaseError) in
            let (id, createdAt, sealed, readAt) = try row.decode([UInt8].self, Timestamp.self, [UInt8].self, Timestamp?.self)
            // As with content: an entry moved here from another device is no entry.
            guard let summary = try? vault.openLogEntry(sealed, part: .summary, notificationID: id, deviceID: deviceID) else {
                RowIntegrity.refused("NotificationLog", row: Hex.encode(id))
                return nil
            }
            return HistoryEntry(notificationID: Hex.encode(id), createdAt: createdAt, summary: summary, readAt: readAt)
        }
    }

    /// Marks the device's notifications among `notificationIDs` read (ids of other
    /// devices, or unknown ones, are ignored); how many were newly marked.
    public func markRead(notificationIDs: [String], deviceID: Int64, now: Timestamp) throws(DatabaseError) -> Int {
        let ids = notificationIDs.compactMap(Self.binaryID)
        guard !ids.isEmpty else { return 0 }
        return try database.execute("""
            UPDATE NotificationLog SET read_at = \(now.databaseString)
            WHERE device_id = \(deviceID) AND id IN (\(list: ids)) AND read_at IS NULL
            """).affectedRows
    }

    /// When the device's newest notification was made (server time), if any is logged.
    public func newestCreatedAt(deviceID: Int64) throws(DatabaseError) -> Timestamp? {
        try database.queryOne("""
            SELECT created_at FROM NotificationLog FORCE INDEX (ix_log_device)
            WHERE device_id = \(deviceID) ORDER BY created_at DESC LIMIT 1
            """).map { row throws(DatabaseError) in try row.decode(Timestamp.self) }
    }

    /// A notification id's 32 hex characters as the 16 bytes the table keys on.
    static func binaryID(_ text: String) -> [UInt8]? {
        guard text.utf8.count == 32, let bytes = Hex.decode(text) else { return nil }
        return bytes
    }
}
