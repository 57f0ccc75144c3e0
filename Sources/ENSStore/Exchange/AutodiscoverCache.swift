public import MariaDB
public import ENSModel

/// Autodiscover's answers per email domain (EWS only): the EWS URL a domain's
/// mailboxes were found at, for `exchange.autodiscover_cache_hours`.
public struct AutodiscoverCache {
    public let database: any SQLDatabase

    public init(database: any SQLDatabase) {
        self.database = database
    }

    public func ewsURL(domain: String, now: Timestamp) throws -> String? {
        try database.queryOne("SELECT ews_url FROM EWSUrlCache WHERE domain = \(domain) AND expires_at > \(now.databaseString)").map { try $0.decode(String.self) }
    }

    public func remember(domain: String, ewsURL: String, expiresAt: Timestamp) throws {
        try database.execute("""
            INSERT INTO EWSUrlCache (domain, ews_url, expires_at) VALUES (\(domain), \(ewsURL), \(expiresAt.databaseString))
            ON DUPLICATE KEY UPDATE ews_url = VALUES(ews_url), expires_at = VALUES(expires_at)
            """)
    }

    public func forget(domain: String) throws {
        try database.execute("DELETE FROM EWSUrlCache WHERE domain = \(domain)")
    }
}
