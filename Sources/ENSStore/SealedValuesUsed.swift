public import MariaDB
public import ENSModel

/// The single-use register of bound sealed values (migration 020, docs/security.md
/// "Sealed values"). A state-changing sealed value is claimed here before anything it
/// asks for happens, by the act it asks for (use, record, sealing time, device); a
/// second claim of the same act (a request log's body resent, verbatim, with a clear
/// parameter swapped or with blocks added) finds the row and is refused. One
/// INSERT IGNORE, so two hosts racing with one value cannot both win: the unique key
/// decides (on Galera, the loser's commit fails certification and its request fails).
public struct SealedValuesUsed {
    public let database: any SQLDatabase

    public init(database: any SQLDatabase) {
        self.database = database
    }

    /// Records each of `marks` (`Vault.sealedActDigest`, `Vault.sealedValueDigest`) until
    /// `expiresAt`, in one statement; false when any of them was recorded before (the
    /// others stay recorded: the value is spent either way).
    public func claim(marks: [[UInt8]], expiresAt: Timestamp) throws(DatabaseError) -> Bool {
        precondition(!marks.isEmpty, "a sealed value is claimed by at least one mark")
        let result = try database.execute("""
            INSERT IGNORE INTO SealedValuesUsed (digest, expires_at) VALUES \(rows: marks.map { [.blob($0), .text(expiresAt.databaseString)] })
            """)
        return result.affectedRows == marks.count
    }
}
