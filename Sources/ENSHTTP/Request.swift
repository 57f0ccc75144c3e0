/// What a handler sees of one HTTP request: method, path, the headers the API uses,
/// and the decoded parameters. Built by `Dispatcher` from the FastCGI variables.
public struct Request: Sendable {
    public var method: String
    public var path: String
    /// The query string as sent (still percent-encoded); the device API ignores it.
    public var query: String
    public var apiToken: String?
    /// The `Authorization` header, read only for routes that ask for it (/metrics).
    public var authorization: String?
    /// `badge: 1` / `development: 1` headers; nil when the header was absent.
    public var badge: Bool?
    public var development: Bool?
    public var parameters: Parameters
    /// The raw body, for routes that take XML (the Exchange callback); empty otherwise.
    public var body: [UInt8]
    /// The client's address as the web server saw it (`REMOTE_ADDR`; behind a load
    /// balancer, what the web server's real-IP configuration made of it), nil when it
    /// sent none. Used only by the proof throttle, never logged (docs/security.md).
    public var clientAddress: String?

    public init(method: String, path: String, query: String = "", apiToken: String? = nil, authorization: String? = nil, badge: Bool? = nil,
                development: Bool? = nil, parameters: Parameters = Parameters(), body: [UInt8] = [], clientAddress: String? = nil) {
        self.method = method
        self.path = path
        self.query = query
        self.apiToken = apiToken
        self.authorization = authorization
        self.badge = badge
        self.development = development
        self.parameters = parameters
        self.body = body
        self.clientAddress = clientAddress
    }
}

/// Named request parameters, decoded from a JSON object or a form body.
/// Values are kept as strings: the contract lets numbers arrive either way.
public struct Parameters: Sendable, Equatable {
    public var values: [String: String]

    public init(_ values: [String: String] = [:]) {
        self.values = values
    }

    public subscript(name: String) -> String? { values[name] }

    /// A required, non-empty parameter.
    public func required(_ name: String) throws(APIError) -> String {
        guard let value = values[name], !value.isEmpty else {
            throw .invalidRequest("Missing parameter '\(name)'.")
        }
        return value
    }

    /// An optional integer parameter ("1" and 1 both arrive as "1").
    public func integer(_ name: String) throws(APIError) -> Int? {
        guard let value = values[name], !value.isEmpty else { return nil }
        guard let number = Int(value) else { throw .invalidRequest("Parameter '\(name)' must be an integer.") }
        return number
    }
}
