internal import ENSModel
internal import FastCGI

/// One request as the web server hands it over: CGI variables (`REQUEST_METHOD`,
/// `CONTENT_LENGTH`, `HTTP_APITOKEN`, ...), the body, and where the answer goes. The
/// dispatcher reads nothing else, so a request can come from libfcgi (`FastCGIRequest`)
/// or from memory (`MemoryRequest`, for in-process tests).
public protocol RequestChannel {
    /// The raw bytes of a CGI variable, or nil when the server did not send it.
    func parameter(_ name: String) -> [UInt8]?
    /// Up to `limit` bytes of the body; fewer when the body ends first.
    func readBody(limit: Int) -> [UInt8]
    /// The answer: CGI headers, a blank line, the body.
    func write(_ bytes: [UInt8])
}

extension FastCGIRequest: RequestChannel {}

/// A request held in memory, and the answer written to it: what in-process tests hand
/// the dispatcher instead of a FastCGI connection.
public final class MemoryRequest: RequestChannel {
    public let variables: [String: String]
    public let body: [UInt8]
    private var bodyRead = 0
    /// Everything the dispatcher wrote.
    public private(set) var written: [UInt8] = []

    /// `CONTENT_LENGTH` is the body's length unless `variables` says otherwise.
    public init(method: String, path: String, headers: [String: String] = [:], contentType: String? = nil, body: [UInt8] = [],
                variables extra: [String: String] = [:]) {
        var variables = ["REQUEST_METHOD": method, "DOCUMENT_URI": path, "CONTENT_LENGTH": "\(body.count)"]
        if let contentType { variables["CONTENT_TYPE"] = contentType }
        for (name, value) in headers {
            variables["HTTP_" + String(name.uppercased().map { $0 == "-" ? "_" : $0 })] = value
        }
        variables.merge(extra) { _, given in given }
        self.variables = variables
        self.body = body
    }

    public func parameter(_ name: String) -> [UInt8]? {
        variables[name].map { Array($0.utf8) }
    }

    public func readBody(limit: Int) -> [UInt8] {
        let end = min(body.count, bodyRead + max(limit, 0))
        defer { bodyRead = end }
        return Array(body[bodyRead..<end])
    }

    public func write(_ bytes: [UInt8]) {
        written += bytes
    }

    /// The answer's head lines and body, split at the first blank line.
    private var parts: (head: [Substring], body: Substring) {
        let text = String(decoding: written, as: UTF8.self)
        var head: [Substring] = []
        var rest = text[...]
        while let end = rest.firstRange(of: "\r\n") {
            let line = rest[..<end.lowerBound]
            rest = rest[end.upperBound...]
            if line.isEmpty { return (head, rest) }
            head.append(line)
        }
        return (head, "")
    }

    /// The answer's headers, by lowercased name.
    public var headers: [String: String] {
        var headers: [String: String] = [:]
        for line in parts.head {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = String(line[line.index(after: colon)...]).trimmingCharacters(in: " ")
        }
        return headers
    }

    /// The answer's status (from the CGI `Status:` header; 200 when absent).
    public var status: Int {
        headers["status"].flatMap { Int($0.prefix(3)) } ?? 200
    }

    /// The answer's body.
    public var responseBody: String { String(parts.body) }
}
