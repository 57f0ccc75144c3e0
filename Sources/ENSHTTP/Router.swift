/// An endpoint: which methods it takes, whether it needs an ApiToken, what body it
/// reads, and its handler.
public struct Route: Sendable {
    public typealias Handler = @Sendable (Request, RequestContext) throws -> APIResponse
    /// The bucket of the user a request is about (`ShardMap`), read before the handler
    /// runs: from the device API's userid, from a callback URL's sealed token. Nil: the
    /// request is about no user, or names no bucket (shard 0).
    public typealias Bucket = @Sendable (Request, RequestContext) -> Int?

    /// What the dispatcher does with a POST body.
    public enum Body: Sendable {
        /// Form or JSON, decoded into `Request.parameters` (the device API).
        case parameters
        /// An XML document (text/xml), handed over raw in `Request.body`, up to `limit`.
        case xml(limit: Int)
        /// Whatever arrives (any or no media type, possibly empty), raw in
        /// `Request.body`, up to `limit`: the handler decides (Graph's notifications,
        /// whose validation requests have an empty text/plain body).
        case raw(limit: Int)
    }

    public let methods: [String]
    public let requiresAPIToken: Bool
    public let body: Body
    /// Whether the handler sees the `Authorization` header (no other route reads it).
    public let readsAuthorization: Bool
    public let handler: Handler
    /// Nil: every request goes to shard 0.
    public let bucket: Bucket?

    public init(methods: [String], requiresAPIToken: Bool, body: Body = .parameters, readsAuthorization: Bool = false,
                bucket: Bucket? = nil, handler: @escaping Handler) {
        self.bucket = bucket
        self.methods = methods
        self.requiresAPIToken = requiresAPIToken
        self.body = body
        self.readsAuthorization = readsAuthorization
        self.handler = handler
    }

    /// GET routes also answer HEAD, as HTTP requires.
    public func allows(_ method: String) -> Bool {
        methods.contains(method) || (method == "HEAD" && methods.contains("GET"))
    }
}

/// Maps exact paths to routes (the API has no path parameters except the Exchange
/// callback, which is matched by prefix).
public struct Router: Sendable {
    private var exact: [String: Route] = [:]
    private var prefixes: [(String, Route)] = []

    public init() {}

    public mutating func add(_ path: String, _ route: Route) {
        exact[path] = route
    }

    public mutating func add(prefix: String, _ route: Route) {
        prefixes.append((prefix, route))
    }

    /// Every label `match` can give, "other" last.
    public var labels: [String] {
        exact.keys.sorted() + prefixes.map(\.0) + ["other"]
    }

    /// The route for `path` (nil: none, or a path that is not UTF-8) and what metrics
    /// call it: the exact path, the prefix of a prefix route (never the rest, which
    /// may carry a sealed token), or "other".
    public func match(_ path: String?) -> (label: String, route: Route?) {
        guard let path else { return ("other", nil) }
        if let route = exact[path] { return (path, route) }
        if let (prefix, route) = prefixes.first(where: { path.hasPrefix($0.0) }) { return (prefix, route) }
        return ("other", nil)
    }
}
