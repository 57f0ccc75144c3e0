internal import CCurl
internal import POSIX

/// Many concurrent HTTP/2 requests over a few long-lived connections, with libcurl's
/// multi interface (CURLPIPE_MULTIPLEX): requests to one host share a connection as
/// streams. Owns the `CURLM` handle and every `CURL` handle and header list it creates;
/// used from one thread.
public final class HTTP2Multiplexer {
    public struct Configuration: Sendable {
        public var caBundlePath: String?
        /// Connections per host; streams are multiplexed over them.
        public var connectionsPerHost: Int
        public var connectTimeout: Duration
        public var requestTimeout: Duration
        /// How long a connection may sit idle before libcurl checks it with an HTTP/2
        /// PING (CURLOPT_UPKEEP_INTERVAL_MS, driven by `upkeep()`).
        public var pingInterval: Duration

        public init(caBundlePath: String? = nil, connectionsPerHost: Int = 2, connectTimeout: Duration = .seconds(5),
                    requestTimeout: Duration = .seconds(15), pingInterval: Duration = .seconds(60)) {
            self.caBundlePath = caBundlePath
            self.connectionsPerHost = connectionsPerHost
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.pingInterval = pingInterval
        }
    }

    /// A finished request: its tag, and the response or the transport failure.
    public struct Completion {
        public let tag: Int
        public let result: Result<HTTPResponse, CurlError>
    }

    private final class Transfer {
        let tag: Int
        let handle: UnsafeMutableRawPointer
        var headerList: UnsafeMutablePointer<curl_slist>?
        let collector = ResponseCollector()

        init(tag: Int, handle: UnsafeMutableRawPointer) {
            self.tag = tag
            self.handle = handle
        }

        deinit {
            curl_slist_free_all(headerList)
            curl_easy_cleanup(handle)
        }
    }

    private let multi: UnsafeMutableRawPointer
    private let configuration: Configuration
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    private let sockets = CorkedSockets()

    public init(configuration: Configuration) throws(CurlError) {
        guard CurlLibrary.initialized, let multi = curl_multi_init() else {
            throw CurlError(code: CURLE_FAILED_INIT, detail: "curl_multi_init")
        }
        self.multi = multi
        self.configuration = configuration
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.connectionsPerHost)
    }

    deinit {
        for (handle, _) in transfers { curl_multi_remove_handle(multi, handle) }
        transfers.removeAll()
        curl_multi_cleanup(multi)
    }

    /// Requests in flight.
    public var inFlight: Int { transfers.count }

    /// Starts a POST; its completion comes out of `poll` with `tag`. With a client
    /// certificate, libcurl only reuses connections made with the same certificate, so
    /// each credential gets its own connections to a host.
    public func post(tag: Int, url: String, headers: [(String, String)], body: [UInt8],
                     clientCertificate: ClientCertificate? = nil) throws(CurlError) {
        guard let handle = curl_easy_init() else { throw CurlError(code: CURLE_FAILED_INIT, detail: "curl_easy_init") }
        let transfer = Transfer(tag: tag, handle: handle)
        for (name, value) in headers { transfer.headerList = curl_slist_append(transfer.headerList, "\(name): \(value)") }
        // No "Expect: 100-continue", and no "Accept: */*" (APNs ignores it; every header
        // is work for the server's HPACK decoder).
        transfer.headerList = curl_slist_append(transfer.headerList, "Expect:")
        transfer.headerList = curl_slist_append(transfer.headerList, "Accept:")
        var options = EasyOptions(handle)
        options.set(CURLOPT_URL, string: url)
        options.set(CURLOPT_NOSIGNAL, 1)
        options.set(CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTPS))
        options.noProxy()
        options.set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        // Wait for an existing connection to multiplex on rather than opening another.
        options.set(CURLOPT_PIPEWAIT, 1)
        options.set(CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeout.wholeMilliseconds)
        options.set(CURLOPT_TIMEOUT_MS, configuration.requestTimeout.wholeMilliseconds)
        options.set(CURLOPT_UPKEEP_INTERVAL_MS, configuration.pingInterval.wholeMilliseconds)
        // libcurl before 8.10 sends HTTP/2 PINGs (curl_easy_upkeep) only through a
        // handle on the connection, and idle multi connections have none. TCP
        // keepalive keeps idle connections known to NATs and firewalls, and finds
        // dead ones, in the meantime.
        // APNs requests and answers are a few KiB: libcurl's default per-handle buffers
        // (16 KiB receive, 64 KiB upload) would cost ~40 MB with 500 requests in flight.
        options.set(CURLOPT_BUFFERSIZE, 4096)
        options.set(CURLOPT_UPLOAD_BUFFERSIZE, 16384)
        options.set(CURLOPT_TCP_KEEPALIVE, 1)
        options.set(CURLOPT_TCP_KEEPIDLE, max(10, Int(configuration.pingInterval.wholeSeconds)))
        options.set(CURLOPT_TCP_KEEPINTVL, 15)
        options.verifyTLS(caBundlePath: configuration.caBundlePath)
        if let clientCertificate { options.clientCertificate(clientCertificate) }
        options.trackSockets(in: sockets)
        options.set(CURLOPT_HTTPHEADER, pointer: UnsafeRawPointer(transfer.headerList))
        options.postBody(body)
        options.collectResponse(into: transfer.collector)
        guard options.result == CURLE_OK else { throw CurlError(code: options.result, detail: "setting up a request") }
        let added = curl_multi_add_handle(multi, handle)
        guard added == CURLM_OK else { throw CurlError(code: CURLE_FAILED_INIT, detail: "curl_multi_add_handle failed (\(added.rawValue))") }
        transfers[handle] = transfer
    }

    /// Drives transfers for up to `timeoutMilliseconds` and returns those that finished.
    public func poll(timeoutMilliseconds: Int) -> [Completion] {
        perform()
        if transfers.isEmpty {
            return []
        }
        _ = curl_multi_poll(multi, nil, 0, Int32(timeoutMilliseconds), nil)
        perform()
        var completions: [Completion] = []
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                  let transfer = transfers.removeValue(forKey: handle) else { continue }
            let code = message.pointee.data.result
            curl_multi_remove_handle(multi, handle)
            if code == CURLE_OK {
                completions.append(Completion(tag: transfer.tag, result: .success(transfer.collector.response(handle: handle))))
            } else {
                completions.append(Completion(tag: transfer.tag, result: .failure(CurlError(code: code, detail: ""))))
            }
        }
        return completions
    }

    private func perform() {
        var running: Int32 = 0
        sockets.cork(true)
        _ = curl_multi_perform(multi, &running)
        sockets.cork(false)
    }

    /// Lets libcurl send HTTP/2 PINGs on connections idle past the ping interval.
    public func upkeep() {
        for (handle, _) in transfers.prefix(1) { _ = curl_easy_upkeep(handle) }
    }
}

/// A multiplexer's open sockets, as libcurl's open and close callbacks report them.
///
/// libcurl 7.88 hands every HTTP/2 frame to OpenSSL as its own write, so a request
/// leaves as three TLS records in three TCP segments, and each wakes the peer (APNs, or
/// the simulator) on its own. Corking the sockets while libcurl runs and uncorking them
/// after sends what one `curl_multi_perform` wrote in full segments instead. Used from
/// the multiplexer's thread only (libcurl calls back from inside its calls).
final class CorkedSockets {
    private var open: Set<curl_socket_t> = []

    func opened(_ socket: curl_socket_t) { open.insert(socket) }
    func closed(_ socket: curl_socket_t) { open.remove(socket) }

    func cork(_ on: Bool) {
        for socket in open { _ = ccurl_socket_cork(socket, on ? 1 : 0) }
    }
}
