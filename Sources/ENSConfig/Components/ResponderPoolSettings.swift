

/// The FastCGI responder pool (ens-fcgi): its socket, processes and threads.
public struct ResponderPoolSettings: SettingsComponent {
    public var socket = "/run/ens/fcgi.sock"
    public var socketMode: UInt32 = 0o660
    public var processes = 2
    public var threads = 4
    /// Run responder threads under SCHED_BATCH (see `Scheduling.useBatchPolicy`).
    public var batchScheduling = true
    public var backlog: Int32 = 1024
    public var maxBodyBytes = 65536
    /// How long a responder trusts its last database check when answering /alive.
    public var healthCache: Duration = .milliseconds(1000)

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, ResponderPoolSettings> & Sendable = \.pool

    public static let section = ConfigSection("FastCGI responder pool (ens-fcgi)", keys: [
        key("fcgi.socket", \.socket, .path,
            doc: "Unix socket on which the responders accept FastCGI connections from nginx.",
            details: """
            Must match the `upstream ens_fcgi` server in the nginx site. When ens-fcgi
            is started by systemd socket activation (deploy/systemd/ens-fcgi.socket)
            the socket comes from systemd and this path is only used in log lines;
            keep the two the same. At most 107 bytes (a Unix socket path limit).
            """),
        key("fcgi.socket_mode", \.socketMode, .octalMode,
            doc: "File mode (octal) given to fcgi.socket when ens-fcgi creates the socket itself.",
            details: """
            nginx must be able to connect: with the default the socket is owned by
            ens:ens, so nginx (www-data) can only reach it if you use socket
            activation (which sets owner and mode from the .socket unit) or raise this
            to 0666 inside a directory only ens and www-data can enter (/run/ens is
            0710 ens:www-data, see deploy/tmpfiles.d/ens.conf). Ignored under socket
            activation.
            """),
        key("fcgi.processes", \.processes, .integer(1...64),
            doc: "Number of worker processes.",
            details: """
            Each is a separate process, so a crash in one does not take the others
            down; a dead worker is replaced automatically. Two per CPU core is a
            reasonable start; raise it when workers are busy and CPUs are idle.
            """),
        key("fcgi.threads", \.threads, .integer(1...512),
            doc: "Threads per worker process.",
            details: """
            Each thread answers one request at a time and holds its own MariaDB
            connection, so processes x threads is the number of requests served at
            once and the number of database connections ENS opens (keep it below
            MariaDB's max_connections). Kept-alive nginx connections do not pin
            threads: idle ones wait in epoll, so nginx may keep more connections than
            there are threads.
            """),
        key("fcgi.batch_scheduling", \.batchScheduling, .boolean,
            doc: "Run responder threads under the SCHED_BATCH scheduling policy (yes/no).",
            details: """
            A batch thread that wakes up does not preempt the running one, which lets
            nginx hand over several requests before a responder runs: fewer context
            switches when nginx and ENS share a few cores. Needs no privilege. Set to
            no if you see higher latency under light load.
            """),
        key("fcgi.backlog", \.backlog, .int32(1...65535),
            doc: "listen() backlog of fcgi.socket when ens-fcgi creates it.",
            details: """
            The kernel caps it at net.core.somaxconn. Ignored under socket activation
            (use Backlog= in the .socket unit).
            """),
        key("http.max_body_bytes", \.maxBodyBytes, .integer(1024...16_777_216),
            doc: "Largest request body, in bytes, a responder accepts; larger bodies get 413 PayloadTooLarge without being read.",
            details: """
            nginx enforces its own limit first (client_max_body_size 64k in
            nginx/ens-site.conf); change both together.
            """),
        key("health.cache_ms", \.healthCache, .duration(0...60000, .milliseconds),
            doc: "How long, in milliseconds, a responder thread trusts its last database check when answering GET /alive.",
            details: """
            Within that time /alive answers from the cached result; after it, the
            thread runs SELECT 1 again. 0 checks on every request. Raise it if load
            balancers poll /alive very often.
            """),
    ])
}
