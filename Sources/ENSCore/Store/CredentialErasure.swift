public import MariaDB

/// When stored credentials (`MailCredentials`, `MailCredentialsFresh`) are erased
/// besides their subscription being superseded or their record deleted
/// (docs/security.md, "The lifecycle"). Each step runs inside the caller's transaction,
/// so the change that ends their use and their erasure are one.
struct CredentialErasure {
    let database: any SQLDatabase

    /// A subscription ended (its heartbeats stopped, or the mail server reported it
    /// dead): not subscribed any more, and its credentials, with the fresh ones sealed
    /// to its box key, erased; nothing will call back with them that ENS should answer.
    /// Later attempts (a registration under way) keep theirs.
    func endSubscription(recordID: Int64, generation: Int64) throws {
        try database.execute("UPDATE EnsSubscriptionInfo SET registered = 0 WHERE id = \(recordID) AND generation = \(generation)")
        try database.execute("DELETE FROM MailCredentials WHERE record_id = \(recordID) AND generation <= \(generation)")
        try database.execute("DELETE FROM MailCredentialsFresh WHERE record_id = \(recordID) AND generation <= \(generation)")
    }
}
