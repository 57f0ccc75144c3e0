public import Logging
public import MariaDB
public import OpenSSL
internal import POSIX
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
        try database.queryOne("SELECT COUNT(*) FROM KeyPool")?.decode(Int.self) ?? 0
    }

    /// Generates keys until the pool holds `target`, using `threads` threads for the
    /// (slow, CPU-bound) generation. Returns how many were added.
    @discardableResult
    public func refill(to target: Int, threads: Int = 2, logger: Logger, progress: (Int) -> Void = { _ in }) throws -> Int {
        var missing = max(0, target - (try count()))
        var added = 0
        while missing > 0 {
            let batch = min(missing, 50)
            let keys = try KeyGenerator.generate(count: batch, threads: threads)
            try database.atomically { () throws(DatabaseError) in
                for key in keys {
                    let publicKeyPEM = try storedValue("pool key's public half") { try key.publicKeyPEM }
                    let sealed = try storedValue("pool key") { try vault.sealPoolKey(key) }
                    try database.execute("INSERT INTO KeyPool (public_key_pem, private_key_sealed) VALUES (\(publicKeyPEM), \(sealed))")
                }
            }
            added += batch
            missing -= batch
            logger.debug("key pool batch stored", metadata: ["keys.added": "\(added)"])
            progress(added)
        }
        return added
    }
}

/// RSA-2048 generation on several threads.
public enum KeyGenerator {
    /// Throws `OpenSSLError` or, when no thread starts, `SystemError`.
    public static func generate(count: Int, threads: Int) throws -> [RSAPrivateKey] {
        let results = SynchronizedBox<[Result<RSAPrivateKey, OpenSSLError>]>([])
        let perThread = (count + max(threads, 1) - 1) / max(threads, 1)
        var workers: [OSThread] = []
        for worker in 0..<max(threads, 1) {
            let share = min(perThread, count - worker * perThread)
            if share <= 0 { break }
            workers.append(try OSThread.start(stackSize: 1 << 20) {
                for _ in 0..<share {
                    let result = Result { () throws(OpenSSLError) -> RSAPrivateKey in try RSAPrivateKey.generate() }
                    results.withLock { $0.append(result) }
                }
            })
        }
        for worker in workers { worker.join() }
        return try results.withLock { results in try results.map { try $0.get() } }
    }
}
