public import ENSConfig
public import MariaDB

/// The database settings `ens.conf` names, as MariaDB connection settings: kept here
/// because ENSStore is the one module above the wrappers that speaks to MariaDB.
extension ENSConfiguration {
    /// The service account's connection settings, with its password read from its file.
    public func serviceDatabase() throws(ConfigError) -> MariaDBConfiguration {
        MariaDBConfiguration(
            unixSocket: dbSocket, host: dbHost, port: dbPort, hosts: dbHosts.map { MariaDBConfiguration.Endpoint(host: $0.host, port: $0.port) },
            user: dbUser, password: try ENSConfiguration.secretText(key: "db.password_file", path: dbPasswordFile),
            database: dbName, connectTimeout: dbConnectTimeout, tls: databaseTLS
        )
    }

    /// The migration account's connection settings.
    public func migrationDatabase() throws(ConfigError) -> MariaDBConfiguration {
        MariaDBConfiguration(
            unixSocket: dbSocket, host: dbHost, port: dbPort, hosts: dbHosts.map { MariaDBConfiguration.Endpoint(host: $0.host, port: $0.port) },
            user: dbMigrationUser, password: try ENSConfiguration.secretText(key: "db.migration_password_file", path: dbMigrationPasswordFile),
            database: dbName, connectTimeout: dbConnectTimeout, tls: databaseTLS
        )
    }

    private var databaseTLS: MariaDBConfiguration.TLS? {
        dbTLSCAFile.map { MariaDBConfiguration.TLS(caFile: $0, certificateFile: dbTLSCertificateFile, keyFile: dbTLSKeyFile) }
    }
}

extension ENSConfiguration {
    public var maintenancePolicy: Maintenance.Policy {
        Maintenance.Policy(
            deviceRetention: deviceRetention, disabledRetention: disabledRetention,
            emptyRecordRetention: emptyRecordRetention, subscriptionGrace: subscriptionGrace, wakeupInterval: wakeupInterval,
            historyRetention: historyRetention, historyCount: historyCount
        )
    }
}
