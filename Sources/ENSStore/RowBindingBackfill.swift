public import MariaDB
public import ENSVault

/// Gives the rows written before migrations 014, 021 and 023 their `RowBinding` MACs,
/// once, as `ens-cron migrate` applies each: what they say then is trusted from then on.
/// Never run at any other time: a MAC filled in later for a row that lost it would
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
    public func run() throws(DatabaseError) -> (subscriptions: Int, boxKeys: Int) {
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

    /// Migration 021: the devices and blind subscriptions already there.
    public static let migration021 = "021_row_bindings_everywhere.sql"

    /// The number of device rows and of blind subscriptions bound.
    @discardableResult
    public func runDevicesAndBlindSubscriptions() throws(DatabaseError) -> (devices: Int, blind: Int) {
        var devices = 0
        var lastID: Int64 = 0
        while true {
            let rows = try database.query("""
                SELECT id, subscription_row, token_hash, bundle_id, privacy_mode, preview_key, endpoint, secret_hash FROM Devices
                WHERE id > \(lastID) AND binding_mac IS NULL ORDER BY id LIMIT 1000
                """)
            guard !rows.isEmpty else { break }
            for row in rows {
                let (id, recordID, tokenHash, bundleID, mode, previewKey, endpoint, secretHash)
                    = try row.decode(Int64.self, Int64.self, [UInt8].self, String.self, Int64.self, [UInt8]?.self, String?.self, [UInt8]?.self)
                // Epoch 0: migration 023's epoch column comes later (and 0 keeps this MAC valid).
                let mac = binding.device(id: id, recordID: recordID, tokenHash: tokenHash, bundleID: bundleID, privacyMode: Int(mode),
                                         previewKey: previewKey, endpoint: endpoint, secretHash: secretHash, epoch: 0)
                try database.execute("UPDATE Devices SET binding_mac = \(mac) WHERE id = \(id) AND binding_mac IS NULL")
                devices += 1
                lastID = id
            }
        }
        var blind = 0
        for row in try database.query("""
            SELECT id, record_id, thumbprint, certificate, certificate_id, previous_thumbprint, previous_certificate_id, resource
            FROM GraphBlindSubscriptions WHERE binding_mac IS NULL
            """) {
            let (id, recordID, thumbprint, certificate, certificateID, previousThumbprint, previousID, resource)
                = try row.decode(Int64.self, Int64.self, [UInt8].self, [UInt8].self, String.self, [UInt8]?.self, String?.self, String.self)
            let mac = binding.blindSubscription(id: id, recordID: recordID,
                                                thumbprint: thumbprint, certificate: certificate, certificateID: certificateID,
                                                previousThumbprint: previousThumbprint, previousCertificateID: previousID, resource: resource)
            try database.execute("UPDATE GraphBlindSubscriptions SET binding_mac = \(mac) WHERE id = \(id) AND binding_mac IS NULL")
            blind += 1
        }
        return (devices, blind)
    }

    /// Migration 023: the suppliers of the credentials already there.
    public static let migration023 = "023_suppliers_and_device_epochs.sql"

    /// The number of stored and of fresh credential rows bound.
    @discardableResult
    public func runCredentialSuppliers() throws(DatabaseError) -> (stored: Int, fresh: Int) {
        var stored = 0
        for row in try database.query("SELECT record_id, generation, supplied_by FROM MailCredentials WHERE supplier_mac IS NULL") {
            let (recordID, generation, suppliedBy) = try row.decode(Int64.self, Int64.self, [UInt8]?.self)
            let mac = binding.credentialSupplier(recordID: recordID, generation: generation, suppliedBy: suppliedBy)
            try database.execute("""
                UPDATE MailCredentials SET supplier_mac = \(mac) WHERE record_id = \(recordID) AND generation = \(generation) AND supplier_mac IS NULL
                """)
            stored += 1
        }
        var fresh = 0
        for row in try database.query("SELECT id, record_id, generation, supplied_by, box FROM MailCredentialsFresh WHERE supplier_mac IS NULL") {
            let (id, recordID, generation, suppliedBy, box) = try row.decode(Int64.self, Int64.self, Int64.self, [UInt8]?.self, [UInt8].self)
            let mac = binding.freshSupplier(recordID: recordID, generation: generation, suppliedBy: suppliedBy, box: box)
            try database.execute("UPDATE MailCredentialsFresh SET supplier_mac = \(mac) WHERE id = \(id) AND supplier_mac IS NULL")
            fresh += 1
        }
        return (stored, fresh)
    }
}
