public import MariaDB
public import ENSVault

/// Gives the rows written before migration 014 their `RowBinding` MACs, once, as
/// `ens-cron migrate` applies that migration: what they say then is trusted from then
/// on. Never run at any other time: a MAC filled in later for a row that lost it would
/// bless whatever a database writer put there.
public struct RowBindingBackfill {
    public static let migration = "014_row_bindings.sql"

    let database: any SQLDatabase
    let binding: RowBinding

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        binding = RowBinding(vault: vault)
    }

    /// The number of subscription rows and of box keys bound.
    @discardableResult
    public func run() throws -> (subscriptions: Int, boxKeys: Int) {
        var subscriptions = 0
        var lastID: Int64 = 0
        while true {
            let rows = try database.query("""
                SELECT id, generation, mail_backend, backend_url, backend_tenant, endpoint FROM EnsSubscriptionInfo
                WHERE id > \(lastID) AND binding_mac IS NULL ORDER BY id LIMIT 1000
                """)
            guard !rows.isEmpty else { break }
            for row in rows {
                let (id, generation, backend, url, tenant, endpoint)
                    = try row.decode(Int64.self, Int64.self, String.self, String?.self, String?.self, String?.self)
                let mac = binding.subscription(recordID: id, generation: generation, backend: backend, backendURL: url, tenant: tenant,
                                               endpoint: endpoint)
                try database.execute("UPDATE EnsSubscriptionInfo SET binding_mac = \(mac) WHERE id = \(id) AND binding_mac IS NULL")
                subscriptions += 1
                lastID = id
            }
        }
        var boxKeys = 0
        for row in try database.query("SELECT record_id, generation, box_public_key FROM MailCredentials WHERE box_key_mac IS NULL") {
            let (recordID, generation, publicKey) = try row.decode(Int64.self, Int64.self, [UInt8].self)
            let mac = binding.boxKey(recordID: recordID, generation: generation, publicKey: publicKey)
            try database.execute("""
                UPDATE MailCredentials SET box_key_mac = \(mac) WHERE record_id = \(recordID) AND generation = \(generation) AND box_key_mac IS NULL
                """)
            boxKeys += 1
        }
        return (subscriptions, boxKeys)
    }
}
