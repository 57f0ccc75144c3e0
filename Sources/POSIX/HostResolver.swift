#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A name lookup failed (getaddrinfo's reason; the name is not repeated).
public struct ResolutionError: Error, CustomStringConvertible, Sendable, Equatable {
    public let code: Int32

    public var description: String { "name lookup failed: \(String(cString: gai_strerror(code)))" }
}

/// Looks host names up with the system resolver (getaddrinfo: /etc/hosts, DNS, as
/// nsswitch.conf says). For an outbound request through a proxy, where libcurl never
/// resolves the destination itself: ENS resolves it, checks the addresses and has the
/// proxy connect to the address checked. A lookup is bounded by resolv.conf's timeout
/// and attempts, not by a request's deadline.
public enum HostResolver {
    /// The host's IPv4 and IPv6 addresses, in the resolver's order, without repeats;
    /// an IP literal is its own one address (no lookup).
    public static func addresses(of host: String) throws(ResolutionError) -> [IPAddress] {
        if let literal = IPAddress(host) { return [literal] }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host, nil, &hints, &list)
        guard code == 0 else { throw ResolutionError(code: code) }
        defer { freeaddrinfo(list) }
        var found: [IPAddress] = []
        var entry = list
        while let current = entry {
            if let address = current.pointee.ai_addr {
                let candidate: IPAddress?
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    candidate = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { inet in
                        withUnsafeBytes(of: inet.pointee.sin_addr) { IPAddress(bytes: Array($0)) }
                    }
                case AF_INET6:
                    candidate = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { inet6 in
                        withUnsafeBytes(of: inet6.pointee.sin6_addr) { IPAddress(bytes: Array($0)) }
                    }
                default:
                    candidate = nil
                }
                if let candidate, !found.contains(candidate) { found.append(candidate) }
            }
            entry = current.pointee.ai_next
        }
        guard !found.isEmpty else { throw ResolutionError(code: EAI_NONAME) }
        return found
    }
}
