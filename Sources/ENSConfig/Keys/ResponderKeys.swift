extension ConfigSection {
    static let responder = ConfigSection("FastCGI responder pool (ens-fcgi)", keys: [
        ConfigKey("fcgi.socket", \.fcgiSocket, .path, default: "/run/ens/fcgi.sock",
                  doc: "Unix socket on which the responders accept FastCGI connections from nginx.",
                  details: """
                  Must match the `upstream ens_fcgi` server in the nginx site. When ens-fcgi
                  is started by systemd socket activation (deploy/systemd/ens-fcgi.socket)
                  the socket comes from systemd and this path is only used in log lines;
                  keep the two the same. At most 107 bytes (a Unix socket path limit).
                  """),
        ConfigKey("fcgi.socket_mode", \.fcgiSocketMode, .octalMode, default: "0660",
                  doc: "File mode (octal) given to fcgi.socket when ens-fcgi creates the socket itself.",
                  details: """
                  nginx must be able to connect: with the default the socket is owned by
                  ens:ens, so nginx (www-data) can only reach it if you use socket
                  activation (which sets owner and mode from the .socket unit) or raise this
                  to 0666 inside a directory only ens and www-data can enter (/run/ens is
                  0710 ens:www-data, see deploy/tmpfiles.d/ens.conf). Ignored under socket
                  activation.
                  """),
        ConfigKey("fcgi.processes", \.fcgiProcesses, .integer(1...64), default: "2",
                  doc: "Number of worker processes.",
                  details: """
                  Each is a separate process, so a crash in one does not take the others
                  down; a dead worker is replaced automatically. Two per CPU core is a
                  reasonable start; raise it when workers are busy and CPUs are idle.
                  """),
        ConfigKey("fcgi.threads", \.fcgiThreads, .integer(1...512), default: "4",
                  doc: "Threads per worker process.",
                  details: """
                  Each thread answers one request at a time and holds its own MariaDB
                  connection, so processes x threads is the number of requests served at
                  once and the number of database connections ENS opens (keep it below
                  MariaDB's max_connections). Kept-alive nginx connections do not pin
                  threads: idle ones wait in epoll, so nginx may keep more connections than
                  there are threads.
                  """),
        ConfigKey("fcgi.batch_scheduling", \.fcgiBatchScheduling, .boolean, default: "yes",
                  doc: "Run responder threads under the SCHED_BATCH scheduling policy (yes/no).",
                  details: """
                  A batch thread that wakes up does not preempt the running one, which lets
                  nginx hand over several requests before a responder runs: fewer context
                  switches when nginx and ENS share a few cores. Needs no privilege. Set to
                  no if you see higher latency under light load.
                  """),
        ConfigKey("fcgi.backlog", \.fcgiBacklog, .int32(1...65535), default: "1024",
                  doc: "listen() backlog of fcgi.socket when ens-fcgi creates it.",
                  details: """
                  The kernel caps it at net.core.somaxconn. Ignored under socket activation
                  (use Backlog= in the .socket unit).
                  """),
        ConfigKey("http.max_body_bytes", \.maxBodyBytes, .integer(1024...16_777_216), default: "65536",
                  doc: "Largest request body, in bytes, a responder accepts; larger bodies get 413 PayloadTooLarge without being read.",
                  details: """
                  nginx enforces its own limit first (client_max_body_size 64k in
                  nginx/ens-site.conf); change both together.
                  """),
        ConfigKey("health.cache_ms", \.healthCache, .duration(0...60000, .milliseconds), default: "1000",
                  doc: "How long, in milliseconds, a responder thread trusts its last database check when answering GET /alive.",
                  details: """
                  Within that time /alive answers from the cached result; after it, the
                  thread runs SELECT 1 again. 0 checks on every request. Raise it if load
                  balancers poll /alive very often.
                  """),
        ConfigKey("devices.max_per_record", \.maximumDevicesPerRecord, .integer(1...1000), default: "20", reload: .responders,
                  doc: "Devices one user may have: registering one more removes the least recently active."),
        ConfigKey("quota.records_per_token_per_hour", \.recordsPerTokenPerHour, .integer(1...10_000_000), default: "5000", reload: .responders,
                  doc: "New user records one API token may create per hour (/getpublickey; the token ships in every install).",
                  details: """
                  Past it, new users get 429 until the hour is over. nginx also limits
                  /getpublickey per client address (ens-site.conf).
                  """),
    ])
}
