internal import CCurl

/// Sets options on one easy handle and remembers the first failure, so a caller can set
/// a whole request up and check once. This is the only code that calls libcurl's typed
/// setopt shims (the C functions are variadic).
struct EasyOptions {
    let handle: UnsafeMutableRawPointer
    private(set) var result = CURLE_OK

    init(_ handle: UnsafeMutableRawPointer) {
        self.handle = handle
    }

    mutating func set(_ option: CURLoption, _ value: Int) {
        if result == CURLE_OK { result = ccurl_easy_setopt_long(handle, option, value) }
    }

    mutating func set(_ option: CURLoption, pointer: UnsafeRawPointer?) {
        if result == CURLE_OK { result = ccurl_easy_setopt_ptr(handle, option, pointer) }
    }

    mutating func set(_ option: CURLoption, string: String) {
        if result == CURLE_OK { result = ccurl_easy_setopt_string(handle, option, string) }
    }

    /// Certificate and host-name verification always on; an optional private CA bundle.
    mutating func verifyTLS(caBundlePath: String?) {
        set(CURLOPT_SSL_VERIFYPEER, 1)
        set(CURLOPT_SSL_VERIFYHOST, 2)
        if let caBundlePath { set(CURLOPT_CAINFO, string: caBundlePath) }
    }

    /// Trusts the CA certificates in `pem` (instead of a bundle file); CURL_BLOB_COPY:
    /// libcurl keeps its own copy.
    mutating func trust(pem: [UInt8]) {
        var data = pem
        data.withUnsafeMutableBytes { buffer in
            var blob = curl_blob(data: buffer.baseAddress, len: buffer.count, flags: UInt32(CURL_BLOB_COPY))
            withUnsafePointer(to: &blob) { set(CURLOPT_CAINFO_BLOB, pointer: UnsafeRawPointer($0)) }
        }
    }

    /// No proxy, whatever the environment says: libcurl otherwise takes one from
    /// http_proxy, https_proxy or all_proxy, and the destination policy would then see
    /// only the proxy's address while the proxy went wherever the URL said. An empty
    /// CURLOPT_PROXY turns the environment's proxy off; CURLOPT_NOPROXY "*" says the
    /// same a second way (every host bypasses any proxy).
    mutating func noProxy() {
        set(CURLOPT_PROXY, string: "")
        set(CURLOPT_NOPROXY, string: "*")
    }

    /// Every request through the operator's HTTP proxy `url`, as a CONNECT tunnel (plain
    /// http too), so the proxy connects to the host and port CONNECT_TO names: the
    /// address the destination policy checked. An empty CURLOPT_NOPROXY makes the
    /// environment's no_proxy list count for nothing.
    mutating func proxy(_ url: String) {
        set(CURLOPT_PROXY, string: url)
        set(CURLOPT_NOPROXY, string: "")
        set(CURLOPT_HTTPPROXYTUNNEL, 1)
    }

    /// A client certificate and key from memory. CURL_BLOB_COPY: libcurl keeps its own
    /// copies, so the blob structs may live on the stack.
    mutating func clientCertificate(_ certificate: ClientCertificate) {
        for (option, bytes) in [(CURLOPT_SSLCERT_BLOB, certificate.certificatePEM), (CURLOPT_SSLKEY_BLOB, certificate.privateKeyPEM)] {
            var data = bytes
            data.withUnsafeMutableBytes { buffer in
                var blob = curl_blob(data: buffer.baseAddress, len: buffer.count, flags: UInt32(CURL_BLOB_COPY))
                withUnsafePointer(to: &blob) { set(option, pointer: UnsafeRawPointer($0)) }
            }
        }
        set(CURLOPT_SSLCERTTYPE, string: "PEM")
        set(CURLOPT_SSLKEYTYPE, string: "PEM")
    }

    /// Reports every socket this handle opens to `sockets`, and closes them through it.
    /// `sockets` must outlive the multi handle: libcurl keeps connections, and calls
    /// these callbacks, after the easy handle that opened them is gone.
    mutating func trackSockets(in sockets: CorkedSockets) {
        let pointer = Unmanaged.passUnretained(sockets).toOpaque()
        if result == CURLE_OK {
            result = ccurl_easy_setopt_sockopt_callback(handle) { registry, socket, purpose in
                if purpose == CURLSOCKTYPE_IPCXN, let registry {
                    Unmanaged<CorkedSockets>.fromOpaque(registry).takeUnretainedValue().opened(socket)
                }
                return Int32(CURL_SOCKOPT_OK)
            }
        }
        set(CURLOPT_SOCKOPTDATA, pointer: pointer)
        if result == CURLE_OK {
            result = ccurl_easy_setopt_closesocket_callback(handle) { registry, socket in
                if let registry { Unmanaged<CorkedSockets>.fromOpaque(registry).takeUnretainedValue().closed(socket) }
                return ccurl_socket_close(socket)
            }
        }
        set(CURLOPT_CLOSESOCKETDATA, pointer: pointer)
    }

    /// Has `guard` decide on every socket this handle opens (its address, after DNS and
    /// CONNECT_TO); `guard` must outlive the transfer.
    mutating func guardConnections(with guard: ConnectGuard) {
        if result == CURLE_OK {
            result = ccurl_easy_setopt_opensocket_callback(handle) { context, _, address in
                guard let context else { return CURL_SOCKET_BAD }
                return Unmanaged<ConnectGuard>.fromOpaque(context).takeUnretainedValue().socket(for: address)
            }
        }
        set(CURLOPT_OPENSOCKETDATA, pointer: Unmanaged.passUnretained(`guard`).toOpaque())
    }

    /// A request body; COPYPOSTFIELDS makes libcurl keep its own copy, so `body` may go.
    mutating func postBody(_ body: [UInt8]) {
        set(CURLOPT_POSTFIELDSIZE, body.count)
        body.withUnsafeBytes { set(CURLOPT_COPYPOSTFIELDS, pointer: $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)) }
    }

    /// Sends the response's headers and body to `collector`, which must outlive the transfer.
    mutating func collectResponse(into collector: ResponseCollector) {
        let pointer = Unmanaged.passUnretained(collector).toOpaque()
        if result == CURLE_OK {
            result = ccurl_easy_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, user in
                let collector = Unmanaged<ResponseCollector>.fromOpaque(user!).takeUnretainedValue()
                // Past the limit: a short count makes libcurl stop the transfer now,
                // rather than after the whole body has been taken in.
                guard collector.body.count + size * count <= collector.limit else {
                    collector.overflowed = true
                    return 0
                }
                collector.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: size * count))
                return size * count
            }
        }
        set(CURLOPT_WRITEDATA, pointer: pointer)
        if result == CURLE_OK {
            result = ccurl_easy_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, user in
                let collector = Unmanaged<ResponseCollector>.fromOpaque(user!).takeUnretainedValue()
                collector.addHeaderLine(Array(UnsafeRawBufferPointer(start: data, count: size * count)))
                return size * count
            }
        }
        set(CURLOPT_HEADERDATA, pointer: pointer)
    }

    /// Keeps what the server sends (CURLINFO_HEADER_IN) in `replies`, which must
    /// outlive the transfer; what libcurl sends (the login) is not looked at.
    mutating func collectIMAPReplies(into replies: IMAPReplies) {
        // libcurl hands the untagged replies that repeat a custom command's name (a
        // server's `* SETMETADATA ...` to SETMETADATA) to the write callback as well,
        // whose default writes them to standard output: into the journal, or into a CGI
        // responder's answer. They are in `replies` already; the copy is dropped.
        if result == CURLE_OK {
            result = ccurl_easy_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION) { _, size, count, _ in size * count }
        }
        set(CURLOPT_WRITEDATA, pointer: nil)
        set(CURLOPT_VERBOSE, 1)
        if result == CURLE_OK {
            result = ccurl_easy_setopt_debug_callback(handle) { _, type, data, size, user in
                guard type == CURLINFO_HEADER_IN, let user else { return 0 }
                Unmanaged<IMAPReplies>.fromOpaque(user).takeUnretainedValue().append(UnsafeRawBufferPointer(start: data, count: size))
                return 0
            }
        }
        set(CURLOPT_DEBUGDATA, pointer: Unmanaged.passUnretained(replies).toOpaque())
    }
}

/// Gathers one response's headers and body from libcurl's callbacks.
final class ResponseCollector {
    var body: [UInt8] = []
    var headers: [(String, String)] = []
    let limit: Int
    var overflowed = false

    init(limit: Int = Int.max) {
        self.limit = limit
    }

    func addHeaderLine(_ line: [UInt8]) {
        // A new status line (after a redirect or 100-continue) starts a new header block.
        if line.starts(with: Array("HTTP/".utf8)) {
            headers.removeAll()
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = String(decoding: line[..<colon], as: UTF8.self)
        // The ASCII white space around a value (the OWS after the colon, the line's
        // CRLF) goes as bytes; what is left needs a Unicode trim only when it starts or
        // ends outside ASCII.
        var value = line[(colon + 1)...]
        while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
        while let last = value.last, last == 0x20 || last == 0x09 || last == 0x0D || last == 0x0A { value = value.dropLast() }
        headers.append((name, String(decoding: value, as: UTF8.self).trimmingWhitespace()))
    }

    /// The finished response, with the status and HTTP version libcurl recorded.
    func response(handle: UnsafeMutableRawPointer) -> HTTPResponse {
        var status = 0
        _ = ccurl_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var version = 0
        _ = ccurl_easy_getinfo_long(handle, CURLINFO_HTTP_VERSION, &version)
        return HTTPResponse(status: status, httpMajorVersion: version == Int(CURL_HTTP_VERSION_2_0) ? 2 : 1, headers: headers, body: body)
    }
}

extension String {
    func trimmingWhitespace() -> String {
        // The usual value starts and ends with ASCII that is not white space: a byte
        // check says so, with no Unicode property lookups.
        func plainASCII(_ byte: UInt8?) -> Bool { byte.map { $0 > 0x20 && $0 < 0x80 } ?? false }
        if plainASCII(utf8.first) && plainASCII(utf8.last) { return self }
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
