public import MariaDB
public import ENSCore

/// Writes what APNs said about devices back to MariaDB: when a device was last notified,
/// and that a token is dead. A token is disabled only if it was not registered again
/// after APNs declared it invalid (Apple's 410 timestamp; the SNS rule).
public struct DeviceFeedback {
    public let database: Connection

    public init(database: Connection) {
        self.database = database
    }

    public func delivered(deviceRowID: Int64, at time: Timestamp) throws {
        try database.execute("UPDATE Devices SET last_notified_at = \(time.databaseString) WHERE id = \(deviceRowID)")
    }

    public func disable(deviceRowID: Int64, invalidSince: Timestamp) throws {
        let since = invalidSince.databaseString
        try database.execute("""
            UPDATE Devices SET disabled_at = \(since)
            WHERE id = \(deviceRowID) AND disabled_at IS NULL AND registered_at <= \(since)
            """)
    }
}
