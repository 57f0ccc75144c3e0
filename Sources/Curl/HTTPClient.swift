internal import CCurl
public import POSIX
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP request for `HTTPClient`.
public struct HTTPRequest: Sendable {
    public enum Method: String, Sendable { case get = "GET", head = "HEAD", post = "POST", put = "PUT", patch = "PATCH", delete = "DELETE" }

    public var method: Method
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?
    /// A TLS client certificate and key (PEM) to present, held in memory only.
    public var clientCertificate: ClientCertificate?
    /// Who the request speaks for (a digest of its credentials). A connection opened for
    /// one key is never reused for a request with another: see `HTTPClient.send`.
    public var connectionKey: [UInt8]?

    public init(method: Method, url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
                clientCertificate: ClientCertificate? = nil, connectionKey: [UInt8]? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.clientCertificate = clientCertificate
        self.connectionKey = connectionKey
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
    public var connectTimeout: Duration
    public var totalTimeout: Duration
    /// Offer HTTP/2 over TLS (ALPN); servers that do not speak it get HTTP/1.1.
    public var preferHTTP2: Bool
    /// libcurl CONNECT_TO entries ("HOST:PORT:CONNECT-TO-HOST:CONNECT-TO-PORT"): connect
    /// elsewhere while TLS still verifies the original host name. Tests use it to send
    /// every Exchange host name to the local simulator.
    public var connectTo: [String]
    /// Where this client may connect; nil: anywhere (APNs, the policy service, tests).
    /// With a policy, URLs must be http(s) without user info, name a permitted host on
    /// its scheme's default port (or one the policy lists), and every address libcurl
    /// connects to must be permitted.
    public var destinationPolicy: DestinationPolicy?
    /// The largest response body taken; a longer one is cut off while it downloads.
    public var maximumResponseBytes: Int
    /// A transfer slower than this many bytes per second for `lowSpeedTime` (whole
    /// seconds) is abandoned (0: no limit): a peer that dribbles cannot hold a thread
    /// for the whole timeout on its own.
    public var lowSpeedBytesPerSecond: Int
    public var lowSpeedTime: Duration
    /// An HTTP proxy ("http://host:port") every request goes through, as a CONNECT
    /// tunnel; nil: no proxy at all, whatever http_proxy, https_proxy or all_proxy say.
    /// With a destination policy, the destination is still what is checked: the client
    /// resolves the URL's host itself, refuses it unless every address is permitted,
    /// and has the proxy CONNECT to the address checked (TLS still verifies the host
    /// name). The proxy's own address is not checked: the operator named it.
    public var proxy: String?
    /// The local address connections are made from (an IP address); nil: the one the
    /// kernel picks. Tests use it to be a second client (127.0.0.2) on loopback.
    public var localAddress: String?

    public init(caBundlePath: String? = nil, connectTimeout: Duration = .seconds(3), totalTimeout: Duration = .seconds(10),
                preferHTTP2: Bool = true, connectTo: [String] = [], destinationPolicy: DestinationPolicy? = nil,
                maximumResponseBytes: Int = 16 << 20, lowSpeedBytesPerSecond: Int = 0, lowSpeedTime: Duration = .zero,
                proxy: String? = nil, localAddress: String? = nil) {
        self.caBundlePath = caBundlePath
        self.connectTimeout = connectTimeout
        self.totalTimeout = totalTimeout
        self.preferHTTP2 = preferHTTP2
        self.connectTo = connectTo
        self.destinationPolicy = destinationPolicy
        self.maximumResponseBytes = maximumResponseBytes
        self.lowSpeedBytesPerSecond = lowSpeedBytesPerSecond
        self.lowSpeedTime = lowSpeedTime
        self.proxy = proxy
        self.localAddress = localAddress
    }
}

/// A blocking HTTP client over one reused libcurl easy handle (connections are kept
/// alive between requests). Owns the `CURL` handle; one thread at a time.
public final class HTTPClient {
    private let handle: UnsafeMutableRawPointer
    private let configuration: HTTPClientConfiguration
    private let connectGuard: ConnectGuard?
    /// The connection key of the last request: the one the cached connection serves.
    private var lastConnectionKey: [UInt8]?

    public init(configuration: HTTPClientConfiguration = HTTPClientConfiguration()) throws(CurlError) {
        guard CurlLibrary.initialized, let handle = curl_easy_init() else {
            throw CurlError(code: CURLE_FAILED_INIT, detail: "curl_easy_init")
        }
        self.handle = handle
        self.configuration = configuration
        // Through a proxy every socket goes to the proxy, which the operator named; the
        // destination is checked before the request instead (`pinnedDestination`).
        connectGuard = configuration.proxy == nil ? configuration.destinationPolicy.map(ConnectGuard.init) : nil
    }

    deinit {
        curl_easy_cleanup(handle)
    }

    /// Sends `request` and waits for the whole response. Redirects are not followed:
    /// callers that want them check the target first. `totalTimeout`
    /// overrides the configured limit for this request; `deadline` bounds it further
    /// (the time left of a caller's budget).
    ///
    /// Refused before any I/O: a header name or value with control characters (CR/LF
    /// would let a value such as an OAuth token add headers of its own), a spent
    /// deadline, and with a destination policy a URL it does not permit.
    public func send(_ request: HTTPRequest, totalTimeout: Duration? = nil, deadline: Deadline? = nil) throws(CurlError) -> HTTPResponse {
        for (name, value) in request.headers {
            guard !name.isEmpty, Self.isHeaderSafe(name), Self.isHeaderSafe(value), !name.contains(":") else {
                throw CurlError(.invalidRequest, detail: "a header name or value contains control characters")
            }
        }
        // A spent budget sends nothing, and looks nothing up either.
        if let deadline, deadline.remainingMilliseconds <= 0 { throw CurlError(.budgetExhausted, detail: "no time left for this request") }
        var pinned: String?
        if let policy = configuration.destinationPolicy {
            try Self.check(request.url, against: policy)
            if configuration.proxy != nil { pinned = try Self.pinnedDestination(request.url, policy: policy) }
        }
        var timeout = (totalTimeout ?? configuration.totalTimeout).wholeMilliseconds
        if let deadline {
            let left = deadline.remainingMilliseconds
            guard left > 0 else { throw CurlError(.budgetExhausted, detail: "no time left for this request") }
            timeout = min(timeout, left)
        }
        curl_easy_reset(handle)
        let collector = ResponseCollector(limit: configuration.maximumResponseBytes)
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE))
        var headerList: UnsafeMutablePointer<curl_slist>?
        // The header list must outlive the transfer; it is freed after perform returns.
        var connectToList: UnsafeMutablePointer<curl_slist>?
        defer {
            curl_slist_free_all(headerList)
            curl_slist_free_all(connectToList)
        }
        // The pinned destination first: libcurl takes the first entry that matches.
        for entry in (pinned.map { [$0] } ?? []) + configuration.connectTo {
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
            if let proxy = configuration.proxy { options.proxy(proxy) } else { options.noProxy() }
            options.set(CURLOPT_CONNECTTIMEOUT_MS, min(configuration.connectTimeout.wholeMilliseconds, timeout))
            options.set(CURLOPT_TIMEOUT_MS, timeout)
            options.set(CURLOPT_MAXFILESIZE, configuration.maximumResponseBytes)
            if configuration.lowSpeedBytesPerSecond > 0 {
                options.set(CURLOPT_LOW_SPEED_LIMIT, configuration.lowSpeedBytesPerSecond)
                options.set(CURLOPT_LOW_SPEED_TIME, Int(configuration.lowSpeedTime.wholeSeconds))
            }
            if let connectGuard { options.guardConnections(with: connectGuard) }
            if request.connectionKey != nil {
                // One cached connection per handle, and a new one whenever the request
                // speaks for someone else than the last: a connection is never shared
                // across credentials (client-certificate TLS, server-side auth state).
                options.set(CURLOPT_MAXCONNECTS, 1)
                if request.connectionKey != lastConnectionKey { options.set(CURLOPT_FRESH_CONNECT, 1) }
            }
            if connectToList != nil { options.set(CURLOPT_CONNECT_TO, pointer: UnsafeRawPointer(connectToList)) }
            // "host!": an address to bind, never an interface name looked up.
            if let localAddress = configuration.localAddress { options.set(CURLOPT_INTERFACE, string: "host!" + localAddress) }
            if let certificate = request.clientCertificate { options.clientCertificate(certificate) }
            options.set(CURLOPT_HTTP_VERSION, configuration.preferHTTP2 ? Int(CURL_HTTP_VERSION_2TLS) : Int(CURL_HTTP_VERSION_1_1))
            options.verifyTLS(caBundlePath: configuration.caBundlePath)
            options.set(CURLOPT_HTTPHEADER, pointer: UnsafeRawPointer(headerList))
            switch request.method {
            case .get: options.set(CURLOPT_HTTPGET, 1)
            case .head: options.set(CURLOPT_NOBODY, 1)
            case .post, .put, .patch, .delete:
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
        lastConnectionKey = request.connectionKey
        if let refused = connectGuard?.takeRefusal() {
            throw CurlError(.destinationRefused, detail: "\(refused) is not a permitted address")
        }
        if collector.overflowed || code == CURLE_FILESIZE_EXCEEDED {
            throw CurlError(.responseTooLarge, detail: "over \(configuration.maximumResponseBytes) bytes")
        }
        guard code == CURLE_OK else {
            let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw CurlError(code: code, detail: detail)
        }
        return collector.response(handle: handle)
    }

    /// Through a proxy, the address half of the policy: the URL's host resolved here
    /// (libcurl leaves that to the proxy), refused unless every address is permitted,
    /// and a CONNECT_TO entry that sends the proxy's CONNECT to the first of them, so
    /// the address checked is the address the proxy connects to (no second lookup for
    /// a rebinding DNS server to answer differently).
    static func pinnedDestination(_ url: String, policy: DestinationPolicy) throws(CurlError) -> String {
        guard let parts = URLParts(url) else { throw CurlError(.destinationRefused, detail: "not an http(s) URL") }
        let addresses: [IPAddress]
        do {
            addresses = try HostResolver.addresses(of: parts.host)
        } catch {
            throw CurlError(code: CURLE_COULDNT_RESOLVE_HOST, detail: "\(error)")
        }
        if let refused = addresses.first(where: { !policy.permits($0) }) {
            throw CurlError(.destinationRefused, detail: "\(refused) is not a permitted address")
        }
        let port = parts.port ?? parts.defaultPort
        let host = parts.host.contains(":") ? "[\(parts.host)]" : parts.host
        let address = "\(addresses[0])"
        return "\(host):\(port):\(address.contains(":") ? "[\(address)]" : address):\(port)"
    }

    /// No C0 control character but horizontal tab, and no DEL.
    public static func isHeaderSafe(_ text: String) -> Bool {
        text.utf8.allSatisfy { ($0 >= 0x20 && $0 != 0x7F) || $0 == 0x09 }
    }

    /// The URL-level half of a destination policy (the address half runs as libcurl
    /// connects): http(s), no user info, a permitted host, its scheme's default port
    /// unless the policy lists the host.
    static func check(_ url: String, against policy: DestinationPolicy) throws(CurlError) {
        guard let parts = URLParts(url) else { throw CurlError(.destinationRefused, detail: "not an http(s) URL") }
        guard !parts.hasUserInfo else { throw CurlError(.destinationRefused, detail: "a URL with user info") }
        guard policy.permits(host: parts.host) else { throw CurlError(.destinationRefused, detail: "a host not on the allowed list") }
        if let port = parts.port, port != parts.defaultPort, !policy.lists(host: parts.host) {
            throw CurlError(.destinationRefused, detail: "port \(port)")
        }
    }
}

/// The pieces of an http(s) URL the destination policy, Autodiscover and registration
/// look at: lowercased scheme and host (an IPv6 literal without brackets), the port if
/// one is written, and whether user info is.
public struct URLParts: Equatable, Sendable {
    public let scheme: String
    public let host: String
    public let port: Int?
    public let hasUserInfo: Bool

    public var defaultPort: Int { scheme == "https" ? 443 : 80 }

    /// The server as one string, "scheme://host:port" with the port always written and
    /// an IPv6 host in brackets: what a device is bound to (the SQL of migration 013
    /// writes the same for rows made before it).
    public var origin: String {
        "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port ?? defaultPort)"
    }

    /// Whether two URLs name the same server: scheme, host and port (default made explicit).
    public func sameServer(as other: URLParts) -> Bool {
        scheme == other.scheme && host == other.host && (port ?? defaultPort) == (other.port ?? other.defaultPort)
    }

    public init?(_ url: String) {
        // Bytes, as libcurl reads the URL, and only the scheme and authority: every
        // outbound call checks its URL, and walking it as Characters cost more than
        // the rest of the check.
        let bytes = Array(url.utf8)
        func lowerASCII(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte }
        func hasScheme(_ name: StaticString) -> Bool {
            let length = name.utf8CodeUnitCount
            guard bytes.count >= length + 3, bytes[length] == 0x3A, bytes[length + 1] == 0x2F, bytes[length + 2] == 0x2F else { return false }
            return (0..<length).allSatisfy { lowerASCII(bytes[$0]) == name.utf8Start[$0] }
        }
        if hasScheme("https") {
            scheme = "https"
        } else if hasScheme("http") {
            scheme = "http"
        } else {
            return nil
        }
        let authorityStart = scheme.utf8.count + 3
        let authorityEnd = bytes[authorityStart...].firstIndex {
            $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
        } ?? bytes.endIndex
        var authority = bytes[authorityStart..<authorityEnd]
        hasUserInfo = authority.contains(UInt8(ascii: "@"))
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }
        func number(_ digits: ArraySlice<UInt8>) -> Int? { Int(String(decoding: digits, as: UTF8.self)) }
        let hostBytes: ArraySlice<UInt8>
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            hostBytes = authority[(authority.startIndex + 1)..<close]
            let after = authority[(close + 1)...]
            if after.isEmpty { port = nil } else {
                guard after.first == UInt8(ascii: ":"), let port = number(after.dropFirst()) else { return nil }
                self.port = port
            }
        } else if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
            hostBytes = authority[..<colon]
            guard let port = number(authority[(colon + 1)...]) else { return nil }
            self.port = port
        } else {
            hostBytes = authority
            port = nil
        }
        guard !hostBytes.isEmpty else { return nil }
        // A host outside ASCII (a name not yet in punycode) is lowercased as Unicode.
        host = hostBytes.allSatisfy { $0 < 0x80 }
            ? String(decoding: hostBytes.map(lowerASCII), as: UTF8.self)
            : String(decoding: hostBytes, as: UTF8.self).lowercased()
    }
}

/// A point in monotonic time by which a caller's work must be done: one budget for a
/// registration's Autodiscover hops and Subscribe attempts together, or a callback's
/// Exchange lookups.
public struct Deadline: Sendable {
    private let milliseconds: UInt64

    public static func after(_ budget: Duration) -> Deadline {
        Deadline(milliseconds: now() + UInt64(max(0, budget.wholeMilliseconds)))
    }

    /// Milliseconds left (0 once passed).
    public var remainingMilliseconds: Int {
        let current = Self.now()
        return current >= milliseconds ? 0 : Int(milliseconds - current)
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1000 + UInt64(time.tv_nsec) / 1_000_000
    }
}

/// The address half of a destination policy: libcurl asks it for each socket, with the
/// address it will connect to; a refused address gets no socket, and the refusal is
/// kept for `send` to report.
final class ConnectGuard {
    let policy: DestinationPolicy
    private var refused: IPAddress?
    /// Set while the callback runs: the address family was neither IPv4 nor IPv6.
    private var unknownFamily = false

    init(policy: DestinationPolicy) {
        self.policy = policy
    }

    func socket(for address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
        var bytes = [UInt8](repeating: 0, count: 16)
        let family = ccurl_sockaddr_bytes(address, &bytes)
        let candidate: IPAddress?
        switch family {
        case AF_INET: candidate = IPAddress(bytes: Array(bytes.prefix(4)))
        case AF_INET6: candidate = IPAddress(bytes: bytes)
        default: candidate = nil
        }
        guard let candidate, policy.permits(candidate) else {
            refused = candidate ?? refused
            if candidate == nil { unknownFamily = true }
            return CURL_SOCKET_BAD
        }
        return ccurl_open_socket(address)
    }

    /// The address refused during the last transfer, if any (and forgets it).
    func takeRefusal() -> String? {
        defer {
            refused = nil
            unknownFamily = false
        }
        if let refused { return "\(refused)" }
        return unknownFamily ? "an address of an unknown family" : nil
    }
}
