/// Where and as whom to connect.
public struct MariaDBConfiguration: Sendable {
    /// A Unix socket path; when set, `host`, `port` and `hosts` are ignored.
    public var unixSocket: String?
    public var host: String
    public var port: Int
    /// Several servers (the nodes of a Galera cluster): a connection opens to the first
    /// that answers, starting where the last one of this `Connection` failed, and moves
    /// to the next when its node goes away or leaves the Primary component. Empty: just
    /// `host` and `port`.
    public var hosts: [Endpoint]
    public var user: String
    public var password: String
    public var database: String?
    /// How long to wait for a connection, and for each read or write on it (whole
    /// seconds, MariaDB's unit). Short values make a dead server show up as 503 quickly
    /// instead of stalling responders.
    public var connectTimeout: Duration
    public var readWriteTimeout: Duration
    /// TLS for a TCP connection (a database on another host): nil, none.
    public var tls: TLS?

    /// One server's address.
    public struct Endpoint: Sendable, Equatable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`, IPv6 in brackets: how the operator wrote it in db.hosts.
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// The servers to try, in order.
    var endpoints: [Endpoint] { hosts.isEmpty ? [Endpoint(host: host, port: port)] : hosts }

    /// TLS is required when set: the server's certificate must chain to `caFile` and
    /// name the host connected to, or the connection fails. A client certificate and
    /// key are optional (for accounts created `REQUIRE X509`).
    public struct TLS: Sendable, Equatable {
        public var caFile: String
        public var certificateFile: String?
        public var keyFile: String?

        public init(caFile: String, certificateFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    public init(
        unixSocket: String? = nil, host: String = "localhost", port: Int = 3306, hosts: [Endpoint] = [],
        user: String, password: String, database: String?,
        connectTimeout: Duration = .seconds(2), readWriteTimeout: Duration = .seconds(10), tls: TLS? = nil
    ) {
        self.unixSocket = unixSocket
        self.host = host
        self.port = port
        self.hosts = hosts
        self.user = user
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.readWriteTimeout = readWriteTimeout
        self.tls = tls
    }
}
