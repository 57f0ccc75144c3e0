public import Foundation
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// One HTTP request as ``ENSClient`` makes it: always a `POST` of a JSON body, or the
/// `GET /alive` probe.
public struct ENSHTTPRequest: Sendable, Equatable {
    public var method: String
    public var url: URL
    /// Header names as ENS documents them (`ApiToken`, `badge`, `development`,
    /// `Content-Type`).
    public var headers: [String: String]
    public var body: Data

    public init(method: String, url: URL, headers: [String: String] = [:], body: Data = Data()) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// One HTTP response as a transport hands it to ``ENSClient``.
public struct ENSHTTPResponse: Sendable, Equatable {
    public var status: Int
    /// Header names lowercased, so lookups do not depend on how the server or the
    /// platform spelled them.
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { _, last in last })
        self.body = body
    }

    /// The value of a header, whatever its case.
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// Why a transport could not produce a response (no connection, TLS refused, timeout).
/// The description is the platform's; it never contains the request's body.
public struct ENSTransportError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Sends ``ENSClient``'s requests. The default is ``URLSessionTransport``; tests inject
/// recorded answers, and Linux hosts that must trust a private CA use `ENSKitCurl`.
public protocol ENSHTTPTransport: Sendable {
    func send(_ request: ENSHTTPRequest) async throws(ENSTransportError) -> ENSHTTPResponse
}

/// The default transport: a `URLSession` (the shared one unless given another, for
/// instance a background-capable or ephemeral session).
///
/// On Apple platforms the system's trust evaluation applies; ENSKit adds no pinning of
/// its own to the TLS certificate (an app that wants it gives a session whose delegate
/// pins). On Linux, URLSession trusts only the system's CA bundle.
public struct URLSessionTransport: ENSHTTPTransport {
    private let session: URLSession
    /// Seconds before a request is abandoned. A registration may take ENS up to its
    /// registration budget (20 s by default) to prove the credentials at Exchange.
    private let timeout: Duration

    public init(session: URLSession = .shared, timeout: Duration = .seconds(60)) {
        self.session = session
        self.timeout = timeout
    }

    public func send(_ request: ENSHTTPRequest) async throws(ENSTransportError) -> ENSHTTPResponse {
        var urlRequest = URLRequest(url: request.url, cachePolicy: .reloadIgnoringLocalCacheData,
                                    timeoutInterval: TimeInterval(timeout.components.seconds))
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        if !request.body.isEmpty { urlRequest.httpBody = request.body }
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.data(for: urlRequest)
        } catch {
            throw ENSTransportError("\(type(of: error)): \(error.localizedDescription)")
        }
        guard let http = response as? HTTPURLResponse else { throw ENSTransportError("not an HTTP response") }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return ENSHTTPResponse(status: http.statusCode, headers: headers, body: data)
    }
}
