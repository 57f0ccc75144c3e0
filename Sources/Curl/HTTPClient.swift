internal import CCurl

/// An HTTP request for `HTTPClient`.
public struct HTTPRequest: Sendable {
    public enum Method: String, Sendable { case get = "GET", head = "HEAD", post = "POST", put = "PUT", delete = "DELETE" }

    public var method: Method
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?

    public init(method: Method, url: String, headers: [(String, String)] = [], body: [UInt8]? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
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

    public init(caBundlePath: String? = nil, connectTimeoutMilliseconds: Int = 3000, totalTimeoutMilliseconds: Int = 10000, preferHTTP2: Bool = true) {
        self.caBundlePath = caBundlePath
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.totalTimeoutMilliseconds = totalTimeoutMilliseconds
        self.preferHTTP2 = preferHTTP2
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

    /// Sends `request` and waits for the whole response.
    public func send(_ request: HTTPRequest) throws(CurlError) -> HTTPResponse {
        curl_easy_reset(handle)
        let collector = ResponseCollector()
        let collectorPointer = Unmanaged.passUnretained(collector).toOpaque()
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE))
        var headerList: UnsafeMutablePointer<curl_slist>?
        // The header list must outlive the transfer; it is freed after perform returns.
        defer { curl_slist_free_all(headerList) }
        for (name, value) in request.headers {
            headerList = curl_slist_append(headerList, "\(name): \(value)")
        }
        // "Expect: 100-continue" would add a round trip to every POST.
        headerList = curl_slist_append(headerList, "Expect:")

        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errorPointer in
            var result = ccurl_easy_setopt_string(handle, CURLOPT_URL, request.url)
            func set(_ option: CURLoption, _ value: Int) {
                if result == CURLE_OK { result = ccurl_easy_setopt_long(handle, option, value) }
            }
            func setPointer(_ option: CURLoption, _ value: UnsafeRawPointer?) {
                if result == CURLE_OK { result = ccurl_easy_setopt_ptr(handle, option, value) }
            }
            setPointer(CURLOPT_ERRORBUFFER, errorPointer.baseAddress)
            set(CURLOPT_NOSIGNAL, 1)
            set(CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTP | CURLPROTO_HTTPS))
            set(CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeoutMilliseconds)
            set(CURLOPT_TIMEOUT_MS, configuration.totalTimeoutMilliseconds)
            set(CURLOPT_SSL_VERIFYPEER, 1)
            set(CURLOPT_SSL_VERIFYHOST, 2)
            set(CURLOPT_HTTP_VERSION, configuration.preferHTTP2 ? Int(CURL_HTTP_VERSION_2TLS) : Int(CURL_HTTP_VERSION_1_1))
            if let ca = configuration.caBundlePath, result == CURLE_OK {
                result = ccurl_easy_setopt_string(handle, CURLOPT_CAINFO, ca)
            }
            setPointer(CURLOPT_HTTPHEADER, UnsafeRawPointer(headerList))
            switch request.method {
            case .get: set(CURLOPT_HTTPGET, 1)
            case .head: set(CURLOPT_NOBODY, 1)
            case .post, .put, .delete:
                if request.method != .post, result == CURLE_OK {
                    result = ccurl_easy_setopt_string(handle, CURLOPT_CUSTOMREQUEST, request.method.rawValue)
                }
                let body = request.body ?? []
                set(CURLOPT_POSTFIELDSIZE, body.count)
                // COPYPOSTFIELDS: libcurl keeps its own copy, so our array may go away.
                body.withUnsafeBytes { setPointer(CURLOPT_COPYPOSTFIELDS, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)) }
            }
            if result == CURLE_OK {
                result = ccurl_easy_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, user in
                    let collector = Unmanaged<ResponseCollector>.fromOpaque(user!).takeUnretainedValue()
                    collector.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: size * count))
                    return size * count
                }
            }
            setPointer(CURLOPT_WRITEDATA, collectorPointer)
            if result == CURLE_OK {
                result = ccurl_easy_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, user in
                    let collector = Unmanaged<ResponseCollector>.fromOpaque(user!).takeUnretainedValue()
                    collector.addHeaderLine(Array(UnsafeRawBufferPointer(start: data, count: size * count)))
                    return size * count
                }
            }
            setPointer(CURLOPT_HEADERDATA, collectorPointer)
            if result != CURLE_OK { return result }
            let performed = curl_easy_perform(handle)
            // The error buffer must not outlive this scope inside libcurl.
            _ = ccurl_easy_setopt_ptr(handle, CURLOPT_ERRORBUFFER, nil)
            return performed
        }
        guard code == CURLE_OK else {
            let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw CurlError(code: code, detail: detail)
        }
        var status = 0
        _ = ccurl_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var version = 0
        _ = ccurl_easy_getinfo_long(handle, CURLINFO_HTTP_VERSION, &version)
        return HTTPResponse(
            status: status,
            httpMajorVersion: version == Int(CURL_HTTP_VERSION_2_0) ? 2 : 1,
            headers: collector.headers,
            body: collector.body
        )
    }
}

/// Gathers one response's headers and body from libcurl's callbacks.
private final class ResponseCollector {
    var body: [UInt8] = []
    var headers: [(String, String)] = []

    func addHeaderLine(_ line: [UInt8]) {
        // A new status line (after a redirect or 100-continue) starts a new header block.
        if line.starts(with: Array("HTTP/".utf8)) {
            headers.removeAll()
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = String(decoding: line[..<colon], as: UTF8.self)
        let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingWhitespace()
        headers.append((name, value))
    }
}

extension String {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
