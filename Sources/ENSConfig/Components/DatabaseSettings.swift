internal import POSIX



/// Where the database is and how ENS logs in (the service account, and the migration account ens-cron uses).
public struct DatabaseSettings: SettingsComponent {
    public var socket: String? = "/run/mysqld/mysqld.sock"
    public var host = "localhost"
    public var port = 3306
    /// Several servers (the nodes of a Galera cluster), tried in order; empty: db.host.
    public var hosts: [DatabaseEndpoint] = []
    /// TLS to a database on another host (TCP): required and verified when a CA is set.
    public var tlsCAFile: String?
    public var tlsCertificateFile: String?
    public var tlsKeyFile: String?
    public var name = "ens"
    /// The shard map file (`ShardMap`); nil: one database.
    public var shardMapFile: String?
    public var user = "ens_service"
    public var passwordFile = "/etc/ens/secrets/db-service.password"
    public var migrationUser = "ens_migrate"
    public var migrationPasswordFile = "/etc/ens/secrets/db-migrate.password"
    public var connectTimeout: Duration = .seconds(2)
    public var migrationsDirectory = "/usr/share/ens/sql/migrations"

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, DatabaseSettings> & Sendable = \.database

    public static let section = ConfigSection("Database (MariaDB)", keys: [
        key("db.socket", \.socket, .optional(.path),
            doc: "MariaDB's Unix socket.",
            details: """
            When set, db.host and db.port are ignored. Leave the value empty
            (`db.socket =`) to connect with db.host and db.port instead.
            """),
        key("db.host", \.host, .nonEmpty,
            doc: "Server host name or address, used only when db.socket is empty.",
            details: """
            Note that the client library treats `localhost` as "the default Unix
            socket"; to use TCP to this machine, write 127.0.0.1. The accounts in
            sql/accounts.sql.in are created for 'localhost'; edit them if the database
            is elsewhere.
            """),
        key("db.port", \.port, .integer(1...65535),
            doc: "Server TCP port, used only when db.socket is empty."),
        key("db.hosts", \.hosts, .endpoints,
            doc: "Several servers instead of db.host and db.port: the nodes of a MariaDB Galera cluster, as host:port separated by commas (an IPv6 " +
                 "address in brackets; port 3306 when left out); db.socket must be empty.",
            details: """
            Each connection uses the first that accepts; when its node goes away, is
            cut off from the cluster (not Synced, not in the Primary component) or
            refuses work, it moves to the next and reruns the transaction whole. List
            the host's own node first. docs/deployment.md. For example:

              db.hosts = 10.0.0.11:3306, 10.0.0.12:3306, 10.0.0.13:3306

            Empty: db.host and db.port.
            """),
        key("db.tls_ca_file", \.tlsCAFile, .optional(.path),
            doc: "TLS to a database on another host (TCP only; db.socket must be empty).",
            details: """
            With a CA file set, every connection requires TLS and verifies the
            server's certificate against it, host name included (db.host must be a
            name or address the certificate lists); a server without TLS, a
            certificate from another CA or for another name is refused. Create the
            accounts with REQUIRE SSL on the server. A client certificate and key are
            optional (accounts created REQUIRE X509); both or neither. docs/deployment.md:
            "A database on another host". Empty: no TLS (a local database through
            db.socket). For example:

              db.tls_ca_file = /etc/ens/mariadb-ca.pem
              db.tls_cert_file = /etc/ens/secrets/mariadb-client.pem
              db.tls_key_file = /etc/ens/secrets/mariadb-client.key
            """),
        key("db.tls_cert_file", \.tlsCertificateFile, .optional(.path),
            doc: "A client certificate (PEM) for TLS to the database, with db.tls_key_file."),
        key("db.tls_key_file", \.tlsKeyFile, .optional(.path),
            doc: "The client certificate's key (PEM), with db.tls_cert_file."),
        key("db.name", \.name, .identifier,
            doc: "Database (schema) name: letters, digits and underscores, at most 64."),
        key("db.shard_map", \.shardMapFile, .optional(.path),
            doc: "A file mapping users' buckets to further databases (shards); empty: one database, the one above.",
            details: """
            A user's bucket is the first three hex digits of its userid (000 to fff).
            Each line of the file gives one shard its buckets, where its database is
            and its schema; buckets no line lists stay with shard 0, the database of
            the db.* settings, which also keeps what belongs to no user (API tokens,
            the key pool, leases, sender hosts). Every shard is reached with the same
            accounts, password files, TLS settings and timeouts as db.*. A malformed
            line (an unknown word, a bad number, a bucket listed twice) stops every
            ENS program at start-up. With a map, even one listing no shard, new
            callback URLs name their bucket. A line `freeze <buckets>` answers
            those buckets' requests 503 while their rows move to another shard.
            Read at start only. docs/scaling.md, docs/deployment.md. For example:

              shard 1 buckets 000-7ff hosts 10.0.1.11:3306,10.0.1.12:3306 name ens
              shard 2 buckets 800-9ff,f00 socket /run/mysqld/mysqld.sock name ens_s2
              freeze 9f0-9ff
            """),
        key("db.user", \.user, .identifier,
            doc: "The service account the responders and ens-cron use.",
            details: """
            It may only SELECT, INSERT, UPDATE and DELETE rows in db.name (see
            sql/accounts.sql.in). If you change it, change the account name in that
            file too.
            """),
        key("db.password_file", \.passwordFile, .path,
            doc: "File holding the service account's password.",
            details: """
            Must be readable by the ens user (0640 root:ens).
            """),
        key("db.migration_user", \.migrationUser, .identifier,
            doc: "The migration account, used only by `ens-cron migrate` to create and change tables."),
        key("db.migration_password_file", \.migrationPasswordFile, .path,
            doc: "File holding the migration account's password.",
            details: """
            Only `ens-cron migrate` reads it; keep it root-only (0600 root:root) and
            run migrations as root, so the services cannot change the schema even if
            compromised.
            """),
        key("db.connect_timeout_seconds", \.connectTimeout, .duration(1...60, .seconds),
            doc: "Seconds to wait when connecting to MariaDB.",
            details: """
            Short values make a dead database show up quickly as 503
            ServiceUnavailable instead of stalling responder threads.
            """),
        key("db.migrations_dir", \.migrationsDirectory, .path,
            doc: "Directory of the numbered SQL migrations (001_initial.sql, ...) that `ens-cron migrate` applies in order, each once.",
            details: """
            Install sql/migrations/*.sql here.
            """),
    ])
}

extension DatabaseSettings {
    /// Settings that would be ignored are refused rather than silently unused: TCP
    /// servers or TLS files beside a socket, half a client certificate.
    public func check(_ file: ConfigFile) throws(ConfigError) {
        if !hosts.isEmpty, let socket {
            throw ConfigError(key: "db.hosts", line: file.lines["db.hosts"],
                              problem: "lists TCP servers, but db.socket is set (\(socket)): set `db.socket =` (empty) to use them")
        }
        let anyTLS = tlsCAFile != nil || tlsCertificateFile != nil || tlsKeyFile != nil
        guard anyTLS else { return }
        guard let ca = tlsCAFile else {
            throw ConfigError(key: "db.tls_ca_file",
                              problem: "is needed with db.tls_cert_file or db.tls_key_file: the server's certificate is always verified")
        }
        if let socket {
            throw ConfigError(key: "db.tls_ca_file", line: file.lines["db.tls_ca_file"],
                              problem: "applies to TCP connections, but db.socket is set (\(socket)): for a database on another host set " +
                                       "`db.socket =` (empty) and db.host")
        }
        if (tlsCertificateFile == nil) != (tlsKeyFile == nil) {
            throw ConfigError(key: tlsCertificateFile == nil ? "db.tls_cert_file" : "db.tls_key_file",
                              problem: "a client certificate needs both db.tls_cert_file and db.tls_key_file")
        }
        for (key, path) in [("db.tls_ca_file", ca), ("db.tls_cert_file", tlsCertificateFile), ("db.tls_key_file", tlsKeyFile)] {
            guard let path else { continue }
            guard Files.exists(path) else { throw ConfigError(key: key, line: file.lines[key], problem: "names \(path), which does not exist") }
        }
    }
}
