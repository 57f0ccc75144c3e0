/// Where and as whom to connect.
public struct MariaDBConfiguration: Sendable {
    /// A Unix socket path; when set, `host` and `port` are ignored.
    public var unixSocket: String?
    public var host: String
    public var port: Int
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
        unixSocket: String? = nil, host: String = "localhost", port: Int = 3306,
        user: String, password: String, database: String?,
        connectTimeout: Duration = .seconds(2), readWriteTimeout: Duration = .seconds(10), tls: TLS? = nil
    ) {
        self.unixSocket = unixSocket
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.readWriteTimeout = readWriteTimeout
        self.tls = tls
    }
}
