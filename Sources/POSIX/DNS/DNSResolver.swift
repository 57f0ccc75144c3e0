#if canImport(Glibc)
import Glibc
#endif

/// A stub resolver for SRV records: one UDP query per nameserver, in order, until one
/// answers. getaddrinfo cannot ask for SRV records and libresolv's state is not ours to
/// own per thread, so ENS asks itself: the question is one packet, the reply is read by
/// `DNSMessage` and must come from the nameserver asked (the socket is connected), with
/// the query's random id and question.
public struct DNSResolver: Sendable {
    public struct Nameserver: Sendable, Equatable, CustomStringConvertible {
        public let address: IPAddress
        public let port: UInt16

        public init(address: IPAddress, port: UInt16 = 53) {
            self.address = address
            self.port = port
        }

        /// "IP", "IP:PORT" or "[IPv6]:PORT".
        public init?(_ text: String) {
            if let address = IPAddress(text) {
                self.init(address: address)
                return
            }
            let host: Substring, portText: Substring
            if text.hasPrefix("["), let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") {
                host = text[text.index(after: text.startIndex)..<close]
                portText = text[text.index(close, offsetBy: 2)...]
            } else if let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") {
                host = text[..<colon]
                portText = text[text.index(after: colon)...]
            } else {
                return nil
            }
            guard let address = IPAddress(String(host)), let port = UInt16(portText), port > 0 else { return nil }
            self.init(address: address, port: port)
        }

        public var description: String { "\(address):\(port)" }
    }

    public let nameservers: [Nameserver]
    /// How long each nameserver is given.
    public let timeout: Duration

    /// Why there are no nameservers, when the configuration could not be read.
    let unavailable: String?

    public init(nameservers: [Nameserver], timeout: Duration = .seconds(2)) {
        self.init(nameservers: nameservers, timeout: timeout, unavailable: nil)
    }

    init(nameservers: [Nameserver], timeout: Duration, unavailable: String?) {
        self.nameservers = nameservers
        self.timeout = timeout
        self.unavailable = unavailable
    }

    /// The nameservers /etc/resolv.conf lists (at most three, as glibc takes). As
    /// resolv.conf(5) says, a file that is missing or names none means the nameserver on
    /// this machine; a file that cannot be read is an error, which every lookup reports.
    public static func system(timeout: Duration = .seconds(2), path: String = "/etc/resolv.conf") -> DNSResolver {
        let listed: [Nameserver]
        do {
            listed = nameservers(inResolvConf: String(decoding: try Files.read(path), as: UTF8.self))
        } catch where error.isMissing {
            listed = []
        } catch {
            return DNSResolver(nameservers: [], timeout: timeout, unavailable: "\(path): \(error)")
        }
        return DNSResolver(nameservers: listed.isEmpty ? [Nameserver(address: IPAddress("127.0.0.1")!)] : Array(listed.prefix(3)), timeout: timeout)
    }

    /// The `nameserver` lines of a resolv.conf text, in order (a scoped IPv6 address,
    /// which ENS cannot connect to by its text alone, is skipped).
    static func nameservers(inResolvConf text: String) -> [Nameserver] {
        text.split(whereSeparator: \.isNewline).compactMap { line in
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 2, fields[0] == "nameserver", let address = IPAddress(String(fields[1])) else { return nil }
            return Nameserver(address: address)
        }
    }

    /// `name`'s SRV records, as the first nameserver that answers gives them (empty when
    /// the name or its records do not exist).
    public func srv(_ name: String) throws(DNSError) -> [SRVRecord] {
        guard !nameservers.isEmpty else { throw DNSError(.unavailable, unavailable ?? "no nameserver is configured") }
        var last = DNSError(.timeout, "no nameserver answered")
        for server in nameservers {
            do {
                return try ask(server, name: name)
            } catch {
                // A malformed reply or a failure at one server: the next may answer.
                last = error
            }
        }
        throw last
    }

    private func ask(_ server: Nameserver, name: String) throws(DNSError) -> [SRVRecord] {
        let id = UInt16.random(in: 0...UInt16.max)
        let query = try DNSMessage.query(id: id, name: name, type: DNSMessage.typeSRV)
        // An IPv4 nameserver (held IPv4-mapped) gets an AF_INET socket.
        let mapped = server.address.bytes.prefix(12).elementsEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF])
        let v4 = mapped ? Array(server.address.bytes.suffix(4)) : nil
        let fd = socket(v4 != nil ? AF_INET : AF_INET6, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DNSError(.unavailable, "socket: errno \(errno)") }
        defer { close(fd) }
        let connected: Int32
        if let v4 {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = server.port.bigEndian
            withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: v4) }
            connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        } else {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = server.port.bigEndian
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: server.address.bytes) }
            connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        guard connected == 0 else { throw DNSError(.unavailable, "connect to \(server): errno \(errno)") }
        guard query.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == query.count else {
            throw DNSError(.unavailable, "send to \(server): errno \(errno)")
        }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeout.wholeMilliseconds)
        var buffer = [UInt8](repeating: 0, count: DNSMessage.maximumUDPSize + 1)
        while true {
            let now = MonotonicClock.milliseconds()
            guard now < deadline else { throw DNSError(.timeout, "\(server) did not answer within \(timeout.wholeMilliseconds) ms") }
            var poll = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = Glibc.poll(&poll, 1, Int32(deadline - now))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            let received = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if received < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                // ECONNREFUSED: nothing listens there (an ICMP port unreachable).
                throw DNSError(.unavailable, "\(server): errno \(errno)")
            }
            let reply = Array(buffer[..<received])
            do {
                return try DNSMessage.srvAnswers(reply, id: id, name: name)
            } catch where error.kind == .malformed {
                // A stray or forged datagram: keep waiting for the real reply until the deadline.
                continue
            }
        }
    }
}
