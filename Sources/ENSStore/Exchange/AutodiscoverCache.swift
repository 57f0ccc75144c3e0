public import MariaDB
public import ENSModel
public import ENSVault

/// Autodiscover's answers per email domain (EWS only): the EWS URL a domain's
/// mailboxes were found at, for `exchange.autodiscover_cache_hours`. Each row carries a
/// `RowBinding` MAC (migration 021): the next user of a domain sends their password to
/// the cached URL, so a row a database writer made or pointed elsewhere is no answer
/// (logged), and Autodiscover is asked again.
public struct AutodiscoverCache {
    public let database: any SQLDatabase
    let binding: RowBinding

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        binding = RowBinding(vault: vault)
    }

    public func ewsURL(domain: String, now: Timestamp) throws(DatabaseError) -> String? {
        guard let row = try database.queryOne("""
            SELECT ews_url, expires_at, binding_mac FROM EWSUrlCache WHERE domain = \(domain) AND expires_at > \(now.databaseString)
            """) else { return nil }
        let (url, expiresAt, mac) = try row.decode(String.self, Timestamp.self, [UInt8]?.self)
        guard RowBinding.matches(mac, binding.urlCache(domain: domain, ewsURL: url, expiresAt: String(expiresAt.millisecondsSinceEpoch))) else {
            RowIntegrity.refused("EWSUrlCache", row: "a domain's")
            return nil
        }
        return url
    }

    public func remember(domain: String, ewsURL: String, expiresAt: Timestamp) throws(DatabaseError) {
        let mac = binding.urlCache(domain: domain, ewsURL: ewsURL, expiresAt: String(expiresAt.millisecondsSinceEpoch))
        try database.execute("""
            INSERT INTO EWSUrlCache (domain, ews_url, expires_at, binding_mac) VALUES (\(domain), \(ewsURL), \(expiresAt.databaseString), \(mac))
            ON DUPLICATE KEY UPDATE ews_url = VALUES(ews_url), expires_at = VALUES(expires_at), binding_mac = VALUES(binding_mac)
            """)
    }

    public func forget(domain: String) throws(DatabaseError) {
        try database.execute("DELETE FROM EWSUrlCache WHERE domain = \(domain)")
    }
}
