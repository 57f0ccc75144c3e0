internal import CCurl

/// An HTTP request for `HTTPClient`.
public struct HTTPRequest: Sendable {
    public enum Method: String, Sendable { case get = "GET", head = "HEAD", post = "POST", put = "PUT", delete = "DELETE" }

    public var method: Method
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?
    /// A TLS client certificate and key (PEM) to present, held in memory only.
    public var clientCertificate: ClientCertificate?

    public init(method: Method, url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, clientCertificate: ClientCertificate? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.clientCertificate = clientCertificate
    }
}

/// A client certificate and its private key, both PEM. libcurl copies them for the
/// transfer (CURLOPT_SSLCERT_BLOB / CURLOPT_SSLKEY_BLOB); they never touch the disk.
public struct ClientCertificate: Sendable {
    public let certificatePEM: [UInt8]
    public let privateKeyPEM: [UInt8]

    public init(certificatePEM: [UInt8], privateKeyPEM: [UInt8]) {
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
    }
}

/// An HTTP response.
public struct HTTPResponse: Sendable {
    public let status: Int
    /// 1 for HTTP/1.x, 2 for HTTP/2.
    public let httpMajorVersion: Int
    public let headers: [(String, String)]
    public let body: [UInt8]

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// TLS and timeout settings for a client.
public struct HTTPClientConfiguration: Sendable {
    /// PEM bundle of trusted CAs; nil uses the system store.
    public var caBundlePath: String?
    public var connectTimeoutMilliseconds: Int
    public var totalTimeoutMilliseconds: Int
    /// Offer HTTP/2 over TLS (ALPN); servers that do not speak it get HTTP/1.1.
    public var preferHTTP2: Bool
    /// libcurl CONNECT_TO entries ("HOST:PORT:CONNECT-TO-HOST:CONNECT-TO-PORT"): connect
    /// elsewhere while TLS still verifies the original host name. Tests use it to send
    /// every Exchange host name to the local simulator.
    public var connectTo: [String]

    public init(caBundlePath: String? = nil, connectTimeoutMilliseconds: Int = 3000, totalTimeoutMilliseconds: Int = 10000,
                preferHTTP2: Bool = true, connectTo: [String] = []) {
        self.caBundlePath = caBundlePath
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.totalTimeoutMilliseconds = totalTimeoutMilliseconds
        self.preferHTTP2 = preferHTTP2
        self.connectTo = connectTo
    }
}

/// A blocking HTTP client over one reused libcurl easy handle (connections are kept
/// alive between requests). Owns the `CURL` handle; one thread at a time.
public final class HTTPClient {
    private let handle: UnsafeMutableRawPointer
    private let configuration: HTTPClientConfiguration

    public init(configuration: HTTPClientConfiguration = HTTPClientConfiguration()) throws(CurlError) {
        guard CurlLibrary.initialized, let handle = curl_easy_init() else {
            throw CurlError(code: CURLE_FAILED_INIT, detail: "curl_easy_init")
        }
        self.handle = handle
        self.configuration = configuration
    }

    deinit {
        curl_easy_cleanup(handle)
    }

    /// Sends `request` and waits for the whole response. Redirects are not followed:
    /// callers that want them check the target first. `totalTimeoutMilliseconds`
    /// overrides the configured limit for this request.
    public func send(_ request: HTTPRequest, totalTimeoutMilliseconds: Int? = nil) throws(CurlError) -> HTTPResponse {
        curl_easy_reset(handle)
        let collector = ResponseCollector()
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE))
        var headerList: UnsafeMutablePointer<curl_slist>?
        // The header list must outlive the transfer; it is freed after perform returns.
        var connectToList: UnsafeMutablePointer<curl_slist>?
        defer {
            curl_slist_free_all(headerList)
            curl_slist_free_all(connectToList)
        }
        for entry in configuration.connectTo {
            connectToList = curl_slist_append(connectToList, entry)
        }
        for (name, value) in request.headers {
            headerList = curl_slist_append(headerList, "\(name): \(value)")
        }
        // "Expect: 100-continue" would add a round trip to every POST.
        headerList = curl_slist_append(headerList, "Expect:")

        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errorPointer in
            var options = EasyOptions(handle)
            options.set(CURLOPT_URL, string: request.url)
            options.set(CURLOPT_ERRORBUFFER, pointer: errorPointer.baseAddress)
            options.set(CURLOPT_NOSIGNAL, 1)
            options.set(CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTP | CURLPROTO_HTTPS))
            options.set(CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeoutMilliseconds)
            options.set(CURLOPT_TIMEOUT_MS, totalTimeoutMilliseconds ?? configuration.totalTimeoutMilliseconds)
            if connectToList != nil { options.set(CURLOPT_CONNECT_TO, pointer: UnsafeRawPointer(connectToList)) }
            if let certificate = request.clientCertificate { options.clientCertificate(certificate) }
            options.set(CURLOPT_HTTP_VERSION, configuration.preferHTTP2 ? Int(CURL_HTTP_VERSION_2TLS) : Int(CURL_HTTP_VERSION_1_1))
            options.verifyTLS(caBundlePath: configuration.caBundlePath)
            options.set(CURLOPT_HTTPHEADER, pointer: UnsafeRawPointer(headerList))
            switch request.method {
            case .get: options.set(CURLOPT_HTTPGET, 1)
            case .head: options.set(CURLOPT_NOBODY, 1)
            case .post, .put, .delete:
                if request.method != .post { options.set(CURLOPT_CUSTOMREQUEST, string: request.method.rawValue) }
                options.postBody(request.body ?? [])
            }
            options.collectResponse(into: collector)
            if options.result != CURLE_OK { return options.result }
            let performed = curl_easy_perform(handle)
            // The error buffer must not outlive this scope inside libcurl.
            _ = ccurl_easy_setopt_ptr(handle, CURLOPT_ERRORBUFFER, nil)
            return performed
        }
        guard code == CURLE_OK else {
            let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw CurlError(code: code, detail: detail)
        }
        return collector.response(handle: handle)
    }
}
