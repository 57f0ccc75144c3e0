public import MariaDB
public import ENSModel
public import ENSVault

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
    public func endSubscription(recordID: Int64, generation: Int64) throws(DatabaseError) {
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
    /// offered and no callback took yet go too, and so do the record's orphans
    /// (`orphansErased`). Returns whether a live subscription ended.
    @discardableResult
    public func deviceLeft(recordID: Int64, tokenHash: [UInt8], binding: RowBinding) throws(DatabaseError) -> Bool {
        var ended = false
        let supplied = try database.query("SELECT generation FROM MailCredentials WHERE record_id = \(recordID) AND supplied_by = \(tokenHash)")
        for row in supplied {
            ended = try erase(recordID: recordID, generation: try row.decode(Int64.self)) || ended
        }
        try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND supplied_by = \(tokenHash)")
        return try orphansErased(recordID: recordID, binding: binding) || ended
    }

    /// Erases the record's credentials that no device of it supplied, as its device
    /// leaving would have (migration 023): a supplier that fails its `supplier_mac`
    /// (a database writer cleared or swapped it, so that the credentials would outlive
    /// their device; refused and logged), or one that is no device of the record any
    /// more once the registration window is past (a registration stores credentials
    /// before its device is recorded). A supplier of NULL with a valid MAC is a row
    /// from before migration 016. Returns whether a live subscription ended.
    @discardableResult
    public func orphansErased(recordID: Int64, binding: RowBinding, now: Timestamp = .now()) throws(DatabaseError) -> Bool {
        let settled = now.adding(seconds: -3 * MailSubscriptionStore.CallbackRecord.pendingRegistrationSeconds).databaseString
        var ended = false
        for row in try database.query("""
            SELECT c.generation, c.supplied_by, c.supplier_mac, c.supplied_by IS NULL OR c.created_at > \(settled)
              OR EXISTS (SELECT 1 FROM Devices d WHERE d.subscription_row = c.record_id AND d.token_hash = c.supplied_by)
            FROM MailCredentials c WHERE c.record_id = \(recordID)
            """) {
            let (generation, suppliedBy, mac, supplierKnown) = try row.decode(Int64.self, [UInt8]?.self, [UInt8]?.self, Bool.self)
            let authentic = RowBinding.matches(mac, binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: suppliedBy))
            if !authentic { RowIntegrity.refused("MailCredentials", row: "\(recordID)/\(generation)") }
            if !authentic || !supplierKnown {
                ended = try erase(recordID: recordID, generation: generation) || ended
            }
        }
        for row in try database.query("""
            SELECT f.id, f.generation, f.supplied_by, f.supplier_mac, f.box, f.supplied_by IS NULL OR f.created_at > \(settled)
              OR EXISTS (SELECT 1 FROM Devices d WHERE d.subscription_row = f.record_id AND d.token_hash = f.supplied_by)
            FROM MailCredentialsFresh f WHERE f.record_id = \(recordID)
            """) {
            let (id, generation, suppliedBy, mac, box, supplierKnown) = try row.decode(Int64.self, Int64.self, [UInt8]?.self, [UInt8]?.self,
                                                                                      [UInt8].self, Bool.self)
            let authentic = RowBinding.matches(mac, binding.freshSupplier(recordID: recordID, generation: generation,
                                                                          suppliedBy: suppliedBy, box: box))
            if !authentic { RowIntegrity.refused("MailCredentialsFresh", row: "\(id)") }
            if !authentic || !supplierKnown {
                try database.execute("DELETE FROM MailCredentialsFresh WHERE id = \(id)")
            }
        }
        return ended
    }

    /// Erases one generation's credentials and the fresh ones sealed to its box key;
    /// the live subscription's ends. Returns whether a live subscription ended.
    private func erase(recordID: Int64, generation: Int64) throws(DatabaseError) -> Bool {
        let ended = try database.execute("""
            UPDATE EnsSubscriptionInfo SET registered = 0 WHERE id = \(recordID) AND generation = \(generation) AND registered = 1
            """).affectedRows > 0
        try database.execute("DELETE FROM MailCredentials WHERE record_id = \(recordID) AND generation = \(generation)")
        try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND generation = \(generation)")
        return ended
    }

    public init(database: any SQLDatabase) {
        self.database = database
    }
}
