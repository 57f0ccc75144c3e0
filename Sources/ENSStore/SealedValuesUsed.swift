public import MariaDB
public import ENSModel

/// The single-use register of bound sealed values (migration 020, docs/security.md
/// "Sealed values"). A state-changing sealed value is claimed here before anything it
/// asks for happens; a second claim of the same value (a request log's body resent,
/// verbatim or with a clear parameter swapped) finds the row and is refused. One
/// INSERT IGNORE, so two hosts racing with one value cannot both win: the unique key
/// decides (on Galera, the loser's commit fails certification and its request fails).
public struct SealedValuesUsed {
    public let database: any SQLDatabase

    public init(database: any SQLDatabase) {
        self.database = database
    }

    /// Records `digest` (`Vault.sealedValueDigest`) until `expiresAt`; false when it was
    /// used before.
    public func claim(digest: [UInt8], expiresAt: Timestamp) throws(DatabaseError) -> Bool {
        let result = try database.execute("""
            INSERT IGNORE INTO SealedValuesUsed (digest, expires_at) VALUES (\(digest), \(expiresAt.databaseString))
            """)
        return result.affectedRows == 1
    }
}
