public import ENSConfig
public import MariaDB

/// The database settings `ens.conf` names, as MariaDB connection settings: kept here
/// because ENSStore is the one module above the wrappers that speaks to MariaDB.
extension ENSConfiguration {
    /// The service account's connection settings, with its password read from its file.
    public func serviceDatabase() throws(ConfigError) -> MariaDBConfiguration {
        MariaDBConfiguration(
            unixSocket: database.socket, host: database.host, port: database.port,
            hosts: database.hosts.map { MariaDBConfiguration.Endpoint(host: $0.host, port: $0.port) },
            user: database.user, password: try ENSConfiguration.secretText(key: "db.password_file", path: database.passwordFile),
            database: database.name, connectTimeout: database.connectTimeout, tls: databaseTLS
        )
    }

    /// The migration account's connection settings.
    public func migrationDatabase() throws(ConfigError) -> MariaDBConfiguration {
        MariaDBConfiguration(
            unixSocket: database.socket, host: database.host, port: database.port,
            hosts: database.hosts.map { MariaDBConfiguration.Endpoint(host: $0.host, port: $0.port) },
            user: database.migrationUser,
            password: try ENSConfiguration.secretText(key: "db.migration_password_file", path: database.migrationPasswordFile),
            database: database.name, connectTimeout: database.connectTimeout, tls: databaseTLS
        )
    }

    private var databaseTLS: MariaDBConfiguration.TLS? {
        database.tlsCAFile.map { MariaDBConfiguration.TLS(caFile: $0, certificateFile: database.tlsCertificateFile, keyFile: database.tlsKeyFile) }
    }
}

extension ENSConfiguration {
    public var maintenancePolicy: Maintenance.Policy {
        Maintenance.Policy(
            deviceRetention: maintenance.deviceRetention, disabledRetention: maintenance.disabledRetention,
            emptyRecordRetention: maintenance.emptyRecordRetention, subscriptionGrace: deviceAPI.subscriptionGrace,
            wakeupInterval: maintenance.wakeupInterval, historyRetention: privacy.historyRetention, historyCount: privacy.historyCount
        )
    }
}
