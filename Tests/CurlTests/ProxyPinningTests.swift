import ENSTestSupport
@testable import Curl
import Foundation
import POSIX
import Testing

/// libcurl takes a proxy from http_proxy, https_proxy and all_proxy unless told not to,
/// and the destination policy then sees only the proxy's address while the proxy goes
/// wherever the URL says. Every handle pins "no proxy"; an operator's proxy
/// (`exchange.proxy`) is used as a CONNECT tunnel to the address the policy checked.
/// Loopback listeners stand in for the proxy and the destination, and count what they
/// are offered.
@Suite(.serialized) struct ProxyPinningTests {
    /// A TCP server on 127.0.0.1 that answers every connection with `response` after
    /// reading its request head (or after a second), and records each request's first line.
    final class RecordingServer: @unchecked Sendable {
        let fd: Int32
        let port: Int
        private let response: [UInt8]
        private let lock = NSLock()
        private var accepted = 0
        private var lines: [String] = []

        init(response: String) throws {
            self.response = Array(response.utf8)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
            let listening = listen(descriptor, 16)
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self,
                                                                              capacity: 1) { getsockname(descriptor, $0, &length) } }
            fd = descriptor
            port = Int(UInt16(bigEndian: address.sin_port))
            try #require(bound == 0 && listening == 0)
            Thread.detachNewThread { [self] in serve() }
        }

        /// Stops accepting: the thread's accept fails, and the thread closes the socket.
        /// Not closed here: a thread not yet in accept would then accept on whatever
        /// socket another test opens under the same number.
        func stop() {
            shutdown(fd, Int32(SHUT_RDWR))
        }

        var connections: Int { lock.withLock { accepted } }
        var requestLines: [String] { lock.withLock { lines } }

        private func serve() {
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else {
                    close(fd)
                    return
                }
                lock.withLock { accepted += 1 }
                var head: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                var entry = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
                while !head.containsHeadEnd, poll(&entry, 1, 1000) == 1 {
                    let count = read(client, &buffer, buffer.count)
                    if count <= 0 { break }
                    head += buffer[0..<count]
                }
                if let end = head.firstIndex(of: 0x0D) {
                    let line = String(decoding: head[..<end], as: UTF8.self)
                    lock.withLock { lines.append(line) }
                }
                _ = response.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
                close(client)
            }
        }
    }

    static let proxyVariables = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]

    /// Runs `body` with every proxy variable libcurl reads aimed at `proxyPort`, and no
    /// no_proxy exceptions; restores the environment after.
    static func withEnvironmentProxy<T>(port: Int, _ body: () throws -> T) rethrows -> T {
        let names = proxyVariables + ["no_proxy", "NO_PROXY"]
        let saved = names.map { ($0, ProcessInfo.processInfo.environment[$0]) }
        for name in proxyVariables { setenv(name, "http://127.0.0.1:\(port)", 1) }
        unsetenv("no_proxy")
        unsetenv("NO_PROXY")
        defer {
            for (name, value) in saved {
                if let value { setenv(name, value, 1) } else { unsetenv(name) }
            }
        }
        return try body()
    }

    /// The attack: the process environment names a proxy (a compromised unit file, a
    /// host-wide profile). A request to a permitted loopback server goes straight to it;
    /// one to an address the policy refuses is refused for that address, not for the
    /// proxy's; the proxy is offered no connection either way. The HTTP/2 multiplexer
    /// (APNs) ignores it too.
    @Test func anEnvironmentProxyIsNeverUsed() throws {
        let proxy = try RecordingServer(response: "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        let target = try RecordingServer(response: "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        defer { proxy.stop(); target.stop() }
        try Self.withEnvironmentProxy(port: proxy.port) {
            let permitted = try HTTPClient(configuration: HTTPClientConfiguration(
                connectTimeout: .seconds(1), totalTimeout: .seconds(3),
                destinationPolicy: DestinationPolicy(allowedNetworks: ["127.0.0.0/8"].compactMap(IPNetwork.init), allowedHostSuffixes: ["127.0.0.1"])
            ))
            let answer = try permitted.send(HTTPRequest(method: .get, url: "http://127.0.0.1:\(target.port)/reached"))
            #expect(answer.status == 204)
            #expect(target.requestLines == ["GET /reached HTTP/1.1"])

            let guarded = try HTTPClient(configuration: HTTPClientConfiguration(
                connectTimeout: .seconds(1), totalTimeout: .seconds(3), destinationPolicy: DestinationPolicy()
            ))
            do throws(CurlError) {
                _ = try guarded.send(HTTPRequest(method: .get, url: "http://127.0.0.2/latest/meta-data/"))
                Issue.record("expected a refusal")
            } catch {
                #expect(error.kind == .destinationRefused && error.detail == "127.0.0.2 is not a permitted address", "\(error)")
            }

            let multiplexer = try HTTP2Multiplexer(configuration: .init(connectTimeout: .seconds(1), requestTimeout: .seconds(2)))
            try multiplexer.post(tag: 1, url: "https://127.0.0.1:\(target.port)/3/device/x", headers: [], body: [])
            var completions: [HTTP2Multiplexer.Completion] = []
            let started = Date()
            while completions.isEmpty, Date().timeIntervalSince(started) < 5 { completions += multiplexer.poll(timeoutMilliseconds: 100) }
            #expect(completions.count == 1, "the TLS handshake with a plain server fails, after connecting")
            #expect(target.connections == 2, "the multiplexer connected to the destination itself")
        }
        #expect(proxy.connections == 0)
    }

    /// The operator's proxy: libcurl asks it to CONNECT to the address ENS resolved and
    /// checked (localhost's, an IP literal), not to the host name for the proxy to
    /// resolve again; plain http goes through the tunnel too.
    @Test func aConfiguredProxyTunnelsToTheCheckedAddress() throws {
        let proxy = try RecordingServer(response: "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        defer { proxy.stop() }
        let client = try HTTPClient(configuration: HTTPClientConfiguration(
            connectTimeout: .seconds(1), totalTimeout: .seconds(3),
            destinationPolicy: DestinationPolicy(allowedNetworks: ["127.0.0.0/8", "::1/128"].compactMap(IPNetwork.init),
                                                 allowedHostSuffixes: ["localhost"]),
            proxy: "http://127.0.0.1:\(proxy.port)"
        ))
        #expect(throws: CurlError.self) { try client.send(HTTPRequest(method: .get, url: "http://localhost:4242/x")) }
        let lines = proxy.requestLines
        #expect(lines == ["CONNECT 127.0.0.1:4242 HTTP/1.1"] || lines == ["CONNECT [0:0:0:0:0:0:0:1]:4242 HTTP/1.1"], "\(lines)")
    }

    /// Through the operator's proxy, a destination the policy refuses is still refused,
    /// by its own address, before the proxy is contacted (the proxy's own loopback
    /// address is fine: the operator named it).
    @Test func aConfiguredProxyCarriesNoRefusedDestination() throws {
        let proxy = try RecordingServer(response: "HTTP/1.1 200 Connection established\r\n\r\n")
        defer { proxy.stop() }
        let client = try HTTPClient(configuration: HTTPClientConfiguration(
            connectTimeout: .seconds(1), totalTimeout: .seconds(3), destinationPolicy: DestinationPolicy(),
            proxy: "http://127.0.0.1:\(proxy.port)"
        ))
        for (url, address) in [("http://169.254.169.254/latest/meta-data/", "169.254.169.254"), ("https://127.0.0.2/EWS/Exchange.asmx", "127.0.0.2"),
                               ("https://localhost/EWS/Exchange.asmx", nil)] {
            do {
                _ = try client.send(HTTPRequest(method: .get, url: url))
                Issue.record("expected a refusal of \(url)")
            } catch {
                #expect(error.kind == .destinationRefused, "\(url): \(error)")
                if let address { #expect(error.detail == "\(address) is not a permitted address", "\(url): \(error)") }
            }
        }
        #expect(proxy.connections == 0)
    }
}

private extension [UInt8] {
    var containsHeadEnd: Bool {
        count >= 4 && indices.dropLast(3).contains { self[$0] == 0x0D && self[$0 + 1] == 0x0A && self[$0 + 2] == 0x0D && self[$0 + 3] == 0x0A }
    }
}
