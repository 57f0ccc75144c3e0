/// An endpoint: which methods it takes, whether it needs an ApiToken, and its handler.
public struct Route: Sendable {
    public typealias Handler = @Sendable (Request, RequestContext) throws -> APIResponse

    public let methods: [String]
    public let requiresAPIToken: Bool
    public let handler: Handler

    public init(methods: [String], requiresAPIToken: Bool, handler: @escaping Handler) {
        self.methods = methods
        self.requiresAPIToken = requiresAPIToken
        self.handler = handler
    }

    /// GET routes also answer HEAD, as HTTP requires.
    func allows(_ method: String) -> Bool {
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

    public func route(for path: String) -> Route? {
        if let route = exact[path] { return route }
        return prefixes.first { path.hasPrefix($0.0) }?.1
    }
}
