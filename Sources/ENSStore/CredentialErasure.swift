public import MariaDB

/// When stored credentials (`MailCredentials`, `MailCredentialsFresh`) are erased
/// besides their subscription being superseded or their record deleted
/// (docs/security.md, "The lifecycle"). Each step runs inside the caller's transaction,
/// so the change that ends their use (a lapse, a device removed) and their erasure are
/// one.
public struct CredentialErasure {
    let database: any SQLDatabase

    /// A subscription ended (its heartbeats stopped, or the mail server reported it
    /// dead): not subscribed any more, and its credentials, with the fresh ones sealed
    /// to its box key, erased; nothing will call back with them that ENS should answer.
    /// Later attempts (a registration under way) keep theirs.
    public func endSubscription(recordID: Int64, generation: Int64) throws {
        try database.execute("UPDATE EnsSubscriptionInfo SET registered = 0 WHERE id = \(recordID) AND generation = \(generation)")
        try database.execute("DELETE FROM MailCredentials WHERE record_id = \(recordID) AND generation <= \(generation)")
        try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND generation <= \(generation)")
    }

    /// The device with `tokenHash` left the record (unregistered, reaped, evicted):
    /// credentials it supplied are erased (migration 016). If they were the live
    /// subscription's, it ends, with the fresh credentials other devices left for it
    /// (sealed to a box key that was inside the erased ones, nothing could open them):
    /// the remaining devices' check-ins answer UserRecordPresentNotSubscribed, and they
    /// register again with credentials of their own. Fresh credentials the device
    /// offered and no callback took yet go too. Returns whether a live subscription
    /// ended.
    @discardableResult
    public func deviceLeft(recordID: Int64, tokenHash: [UInt8]) throws -> Bool {
        var ended = false
        let supplied = try database.query("""
            SELECT c.generation, c.generation = s.generation FROM MailCredentials c JOIN EnsSubscriptionInfo s ON s.id = c.record_id
            WHERE c.record_id = \(recordID) AND c.supplied_by = \(tokenHash)
            """)
        for row in supplied {
            let (generation, live) = try row.decode(Int64.self, Bool.self)
            if live {
                ended = try database.execute("""
                    UPDATE EnsSubscriptionInfo SET registered = 0 WHERE id = \(recordID) AND generation = \(generation) AND registered = 1
                    """).affectedRows > 0 || ended
            }
            try database.execute("DELETE FROM MailCredentials WHERE record_id = \(recordID) AND generation = \(generation)")
            try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND generation = \(generation)")
        }
        try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND supplied_by = \(tokenHash)")
        return ended
    }
    public init(database: any SQLDatabase) {
        self.database = database
    }
}
