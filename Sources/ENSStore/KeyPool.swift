public import MariaDB
public import OpenSSL
internal import ENSModel
public import ENSVault

/// Pre-generated RSA-2048 key pairs (table KeyPool), so /getpublickey never generates a
/// key on the request path. `ens-cron keys` refills it.
public struct KeyPool {
    public let database: any SQLDatabase
    public let vault: Vault

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        self.vault = vault
    }

    /// Takes one key out of the pool, or nil when it is empty. SKIP LOCKED lets
    /// concurrent responders take different keys without waiting for each other. The
    /// DELETE is the claim: row locks do not reach other Galera nodes, so two hosts can
    /// pick the same key; the one whose DELETE finds it gone, or whose COMMIT loses
    /// certification, runs again for another key.
    public func take() throws(DatabaseError) -> (publicKeyPEM: String, key: RSAPrivateKey)? {
        try database.atomically { () throws(DatabaseError) in
            guard let row = try database.queryOne("SELECT id, private_key_sealed FROM KeyPool ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED") else {
                return nil
            }
            let (id, sealed) = try row.decode(Int64.self, [UInt8].self)
            guard try database.execute("DELETE FROM KeyPool WHERE id = \(id)").affectedRows == 1 else {
                throw MariaDBError.claimLost("key pool claim")
            }
            // The public half handed out is made from the sealed key, never read from the
            // row (a writer's own key there would have devices seal to them).
            let key = try storedValue("pool key") { try vault.openPoolKey(sealed) }
            return (try storedValue("pool key's public half") { try key.publicKeyPEM }, key)
        }
    }

    public func count() throws(DatabaseError) -> Int {
        try Self.count(database: database)
    }

    /// How many keys wait (no key is opened, so no vault is needed: `ens-cron status`).
    public static func count(database: any SQLDatabase) throws(DatabaseError) -> Int {
        try database.queryOne("SELECT COUNT(*) FROM KeyPool")?.decode(Int.self) ?? 0
    }

    /// Adds `keys`, sealed, in one transaction (`ens-cron keys` generates them).
    public func store(_ keys: [RSAPrivateKey]) throws(DatabaseError) {
        try database.atomically { () throws(DatabaseError) in
            for key in keys {
                let publicKeyPEM = try storedValue("pool key's public half") { try key.publicKeyPEM }
                let sealed = try storedValue("pool key") { try vault.sealPoolKey(key) }
                try database.execute("INSERT INTO KeyPool (public_key_pem, private_key_sealed) VALUES (\(publicKeyPEM), \(sealed))")
            }
        }
    }
}
