extension ConfigSection {
    static let database = ConfigSection("Database (MariaDB)", keys: [
        ConfigKey("db.socket", \.dbSocket, .optional(.path), default: "/run/mysqld/mysqld.sock",
                  doc: "MariaDB's Unix socket.",
                  details: """
                  When set, db.host and db.port are ignored. Leave the value empty
                  (`db.socket =`) to connect with db.host and db.port instead.
                  """),
        ConfigKey("db.host", \.dbHost, .nonEmpty, default: "localhost",
                  doc: "Server host name or address, used only when db.socket is empty.",
                  details: """
                  Note that the client library treats `localhost` as "the default Unix
                  socket"; to use TCP to this machine, write 127.0.0.1. The accounts in
                  sql/accounts.sql.in are created for 'localhost'; edit them if the database
                  is elsewhere.
                  """),
        ConfigKey("db.port", \.dbPort, .integer(1...65535), default: "3306",
                  doc: "Server TCP port, used only when db.socket is empty."),
        ConfigKey("db.hosts", \.dbHosts, .endpoints, default: "",
                  doc: "Several servers instead of db.host and db.port: the nodes of a MariaDB Galera cluster, as host:port separated by commas (an IPv6 address in brackets; port 3306 when left out); db.socket must be empty.",
                  details: """
                  Each connection uses the first that accepts; when its node goes away, is
                  cut off from the cluster (not Synced, not in the Primary component) or
                  refuses work, it moves to the next and reruns the transaction whole. List
                  the host's own node first. docs/deployment.md. For example:

                    db.hosts = 10.0.0.11:3306, 10.0.0.12:3306, 10.0.0.13:3306

                  Empty: db.host and db.port.
                  """),
        ConfigKey("db.tls_ca_file", \.dbTLSCAFile, .optional(.path), default: "",
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
        ConfigKey("db.tls_cert_file", \.dbTLSCertificateFile, .optional(.path), default: "",
                  doc: "A client certificate (PEM) for TLS to the database, with db.tls_key_file."),
        ConfigKey("db.tls_key_file", \.dbTLSKeyFile, .optional(.path), default: "",
                  doc: "The client certificate's key (PEM), with db.tls_cert_file."),
        ConfigKey("db.name", \.dbName, .identifier, default: "ens",
                  doc: "Database (schema) name: letters, digits and underscores, at most 64."),
        ConfigKey("db.shard_map", \.dbShardMap, .optional(.path), default: "",
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
        ConfigKey("db.user", \.dbUser, .identifier, default: "ens_service",
                  doc: "The service account the responders and ens-cron use.",
                  details: """
                  It may only SELECT, INSERT, UPDATE and DELETE rows in db.name (see
                  sql/accounts.sql.in). If you change it, change the account name in that
                  file too.
                  """),
        ConfigKey("db.password_file", \.dbPasswordFile, .path, default: "/etc/ens/secrets/db-service.password",
                  doc: "File holding the service account's password.",
                  details: """
                  Must be readable by the ens user (0640 root:ens).
                  """),
        ConfigKey("db.migration_user", \.dbMigrationUser, .identifier, default: "ens_migrate",
                  doc: "The migration account, used only by `ens-cron migrate` to create and change tables."),
        ConfigKey("db.migration_password_file", \.dbMigrationPasswordFile, .path, default: "/etc/ens/secrets/db-migrate.password",
                  doc: "File holding the migration account's password.",
                  details: """
                  Only `ens-cron migrate` reads it; keep it root-only (0600 root:root) and
                  run migrations as root, so the services cannot change the schema even if
                  compromised.
                  """),
        ConfigKey("db.connect_timeout_seconds", \.dbConnectTimeout, .duration(1...60, .seconds), default: "2",
                  doc: "Seconds to wait when connecting to MariaDB.",
                  details: """
                  Short values make a dead database show up quickly as 503
                  ServiceUnavailable instead of stalling responder threads.
                  """),
        ConfigKey("db.migrations_dir", \.migrationsDirectory, .path, default: "/usr/share/ens/sql/migrations",
                  doc: "Directory of the numbered SQL migrations (001_initial.sql, ...) that `ens-cron migrate` applies in order, each once.",
                  details: """
                  Install sql/migrations/*.sql here.
                  """),
    ])
}
