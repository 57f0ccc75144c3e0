internal import CCurlShim
public import ENSKit
internal import Foundation

/// An ``ENSHTTPTransport`` over the system's libcurl (OpenSSL on Linux), for hosts whose
/// ENS has a certificate of a private CA: URLSession on Linux trusts only the system's
/// bundle. `ens-client` and ENSKit's stack tests use it; apps on Apple platforms use
/// ``URLSessionTransport``.
///
/// HTTP/2 where the server offers it; peer and host name always verified; no proxy
/// from the environment; http(s) only, no redirects (ENS never redirects its API).
public struct CurlTransport: ENSHTTPTransport {
    /// A PEM file of the CAs to trust instead of the system's.
    public let caFile: String?
    public let timeout: Duration

    public init(caFile: String? = nil, timeout: Duration = .seconds(60)) {
        self.caFile = caFile
        self.timeout = timeout
    }

    public func send(_ request: ENSHTTPRequest) async throws(ENSTransportError) -> ENSHTTPResponse {
        let caFile = caFile
        let timeout = Int(self.timeout.components.seconds)
        // curl_easy_perform blocks: it runs on a global queue, not on the caller's
        // executor.
        let result: Result<ENSHTTPResponse, ENSTransportError> = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: Self.perform(request, caFile: caFile, timeout: timeout))
            }
        }
        return try result.get()
    }

    /// The response being read, reached from libcurl's callbacks through their user
    /// pointer. One per request, used by one thread.
    private final class Received {
        var body = Data()
        var headers: [String: String] = [:]
    }

    private static let initialized: CURLcode = enskit_curl_global_init()

    private static func perform(_ request: ENSHTTPRequest, caFile: String?, timeout: Int) -> Result<ENSHTTPResponse, ENSTransportError> {
        guard initialized == CURLE_OK, let handle = curl_easy_init() else { return .failure(ENSTransportError("libcurl did not initialize")) }
        defer { curl_easy_cleanup(handle) }
        let received = Received()
        var list: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(list) }
        for (name, value) in request.headers { list = curl_slist_append(list, "\(name): \(value)") }
        // libcurl adds `Expect: 100-continue` to large POSTs; ENS's front answers at once.
        list = curl_slist_append(list, "Expect:")

        var status = CURLE_OK
        func check(_ code: CURLcode) { if status == CURLE_OK { status = code } }
        check(enskit_curl_setopt_ptr(handle, CURLOPT_URL, request.url.absoluteString))
        check(enskit_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        check(enskit_curl_setopt_long(handle, CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTPS | CURLPROTO_HTTP)))
        check(enskit_curl_setopt_long(handle, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)))
        check(enskit_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
        check(enskit_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
        check(enskit_curl_setopt_ptr(handle, CURLOPT_PROXY, ""))
        check(enskit_curl_setopt_long(handle, CURLOPT_TIMEOUT, timeout))
        if let caFile { check(enskit_curl_setopt_ptr(handle, CURLOPT_CAINFO, caFile)) }
        check(enskit_curl_setopt_ptr(handle, CURLOPT_HTTPHEADER, list))
        if request.method == "POST" {
            check(enskit_curl_setopt_long(handle, CURLOPT_POST, 1))
            check(enskit_curl_setopt_off(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
            // COPYPOSTFIELDS copies, so the body need not outlive this call.
            request.body.withUnsafeBytes { bytes in
                check(enskit_curl_setopt_ptr(handle, CURLOPT_COPYPOSTFIELDS, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)))
            }
        } else if request.method != "GET" {
            check(enskit_curl_setopt_ptr(handle, CURLOPT_CUSTOMREQUEST, request.method))
        }
        let context = Unmanaged.passUnretained(received).toOpaque()
        check(enskit_curl_setopt_ptr(handle, CURLOPT_WRITEDATA, context))
        check(enskit_curl_setopt_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, user in
            guard let user else { return 0 }
            Unmanaged<Received>.fromOpaque(user).takeUnretainedValue().body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self),
                                                                                   count: size * count)
            return size * count
        })
        check(enskit_curl_setopt_ptr(handle, CURLOPT_HEADERDATA, context))
        check(enskit_curl_setopt_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, user in
            guard let user else { return 0 }
            let line = String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)
            let received = Unmanaged<Received>.fromOpaque(user).takeUnretainedValue()
            if line.hasPrefix("HTTP/") {
                received.headers = [:]  // a new response (after a 100 Continue, say)
            } else if let colon = line.firstIndex(of: ":") {
                let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
                received.headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
            }
            return size * count
        })
        guard status == CURLE_OK else {
            return .failure(ENSTransportError("libcurl refused an option: \(String(cString: curl_easy_strerror(status)))"))
        }
        let performed = curl_easy_perform(handle)
        guard performed == CURLE_OK else { return .failure(ENSTransportError(String(cString: curl_easy_strerror(performed)))) }
        var code = 0
        _ = enskit_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &code)
        return .success(ENSHTTPResponse(status: code, headers: received.headers, body: received.body))
    }
}
