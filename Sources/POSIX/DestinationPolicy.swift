/// Where an outbound client may connect: what keeps a client-supplied URL (an `ewsUrl`,
/// an Autodiscover redirect) from aiming ENS at its own host, its network or a cloud
/// metadata service.
///
/// The check runs on the address libcurl is about to connect to, after DNS resolution
/// and CONNECT_TO (CURLOPT_OPENSOCKETFUNCTION), so the address checked is the address
/// used: there is no second lookup for a rebinding DNS server to answer differently.
public struct DestinationPolicy: Sendable, Equatable {
    /// Networks allowed even though they are special (loopback, private, …): the test
    /// stack lists 127.0.0.0/8 for its simulators; an operator may list an internal
    /// Exchange's network.
    public var allowedNetworks: [IPNetwork]
    /// When not empty, the host names a URL may name: each entry matches itself and
    /// its subdomains (`example.com` matches `mail.example.com`).
    public var allowedHostSuffixes: [String]

    public init(allowedNetworks: [IPNetwork] = [], allowedHostSuffixes: [String] = []) {
        self.allowedNetworks = allowedNetworks
        self.allowedHostSuffixes = allowedHostSuffixes.map { $0.lowercased() }
    }

    /// Whether a connection to `address` may be made.
    public func permits(_ address: IPAddress) -> Bool {
        if allowedNetworks.contains(where: { $0.contains(address) }) { return true }
        return !address.isSpecialPurpose
    }

    /// Whether a URL may name `host` (lowercased, no port).
    public func permits(host: String) -> Bool {
        guard !allowedHostSuffixes.isEmpty else { return true }
        let host = host.lowercased()
        return allowedHostSuffixes.contains { host == $0 || host.hasSuffix("." + $0) }
    }

    /// Whether `host` is one the operator listed (then its non-default port is fine too).
    public func lists(host: String) -> Bool {
        !allowedHostSuffixes.isEmpty && permits(host: host)
    }
}

/// An IPv4 or IPv6 address as 16 bytes; IPv4 is held in its IPv4-mapped IPv6 form
/// (::ffff:a.b.c.d), so every form of one IPv4 address compares and classifies alike.
public struct IPAddress: Sendable, Equatable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        if bytes.count == 4 {
            self.bytes = [UInt8](repeating: 0, count: 10) + [0xFF, 0xFF] + bytes
        } else if bytes.count == 16 {
            self.bytes = bytes
        } else {
            return nil
        }
    }

    /// Dotted IPv4 or RFC 4291 IPv6 text (with `::` and an embedded IPv4 tail).
    public init?(_ text: String) {
        if let v4 = Self.parseIPv4(Substring(text)) {
            self.init(bytes: v4)
        } else if let v6 = Self.parseIPv6(text) {
            self.init(bytes: v6)
        } else {
            return nil
        }
    }

    /// The IPv4 address this is, in any of the forms that carry one: mapped
    /// (::ffff:0:0/96), compatible (::/96, deprecated), NAT64 (64:ff9b::/96) and 6to4
    /// (2002::/16), so a special IPv4 address cannot hide in an IPv6 spelling.
    public var embeddedIPv4: [UInt8]? {
        let prefix = bytes.prefix(12)
        if prefix == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] { return Array(bytes[12...]) }
        if prefix.allSatisfy({ $0 == 0 }) && bytes[12...].contains(where: { $0 != 0 }) && !(bytes[12...15] == [0, 0, 0, 1]) {
            return Array(bytes[12...])
        }
        if prefix == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0] { return Array(bytes[12...]) }
        if bytes[0] == 0x20 && bytes[1] == 0x02 { return Array(bytes[2...5]) }
        return nil
    }

    /// Loopback, unspecified, private, shared (CGNAT), link-local (cloud metadata),
    /// multicast, documentation, benchmarking and reserved space, in either family
    /// and in every IPv6 form of an IPv4 one.
    public var isSpecialPurpose: Bool {
        if let v4 = embeddedIPv4, let mapped = IPAddress(bytes: v4) { return Self.specialIPv4.contains { $0.contains(mapped) } }
        return Self.specialIPv6.contains { $0.contains(self) }
    }

    public var description: String {
        if bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] { return bytes[12...].map(String.init).joined(separator: ".") }
        return stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }.joined(separator: ":")
    }

    static let specialIPv4: [IPNetwork] = [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
        "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
        "224.0.0.0/4", "240.0.0.0/4",
    ].compactMap(IPNetwork.init)

    static let specialIPv6: [IPNetwork] = [
        "::/128", "::1/128", "100::/64", "2001:db8::/32", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    ].compactMap(IPNetwork.init)

    static func parseIPv4(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            // No leading zeros: "010" is octal to some parsers and decimal to others.
            guard (1...3).contains(part.count), part.allSatisfy(\.isASCII), part.allSatisfy(\.isNumber),
                  part.count == 1 || part.first != "0", let value = UInt8(part) else { return nil }
            bytes.append(value)
        }
        return bytes
    }

    static func parseIPv6(_ text: String) -> [UInt8]? {
        guard text.contains(":"), text.utf8.count <= 45 else { return nil }
        let halves = text.splitOnDoubleColon()
        guard halves.count <= 2 else { return nil }
        func groups(_ part: String) -> [UInt8]? {
            if part.isEmpty { return [] }
            var bytes: [UInt8] = []
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            for (index, piece) in pieces.enumerated() {
                if index == pieces.count - 1, piece.contains(".") {
                    guard let v4 = parseIPv4(piece) else { return nil }
                    bytes += v4
                    continue
                }
                guard (1...4).contains(piece.count), let value = UInt16(piece, radix: 16) else { return nil }
                bytes += [UInt8(value >> 8), UInt8(value & 0xFF)]
            }
            return bytes
        }
        guard let head = groups(halves[0]) else { return nil }
        if halves.count == 1 { return head.count == 16 ? head : nil }
        guard let tail = groups(halves[1]), head.count + tail.count <= 14 else { return nil }
        return head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
    }
}

/// A CIDR network, `address/length` (an IPv4 network is held in mapped form, its
/// length counted from bit 96).
public struct IPNetwork: Sendable, Equatable, CustomStringConvertible {
    public let address: IPAddress
    /// Prefix length over the 128-bit form.
    public let length: Int

    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let address = IPAddress(String(parts[0])), let bits = Int(parts[1]) else { return nil }
        let isIPv4 = IPAddress.parseIPv4(parts[0]) != nil
        guard bits >= 0, bits <= (isIPv4 ? 32 : 128) else { return nil }
        self.address = address
        self.length = isIPv4 ? 96 + bits : bits
    }

    public func contains(_ candidate: IPAddress) -> Bool {
        var remaining = length
        for index in 0..<16 where remaining > 0 {
            let take = min(8, remaining)
            let mask: UInt8 = take == 8 ? 0xFF : ~(0xFF >> UInt8(take))
            if candidate.bytes[index] & mask != address.bytes[index] & mask { return false }
            remaining -= take
        }
        return true
    }

    public var description: String {
        let isIPv4 = address.bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] && length >= 96
        return "\(address)/\(isIPv4 ? length - 96 : length)"
    }
}

private extension String {
    /// The parts between occurrences of "::" (":::" counts as one and a stray ":").
    func splitOnDoubleColon() -> [String] {
        var parts: [String] = []
        var current: [Character] = []
        var characters = Array(self)[...]
        while let first = characters.first {
            if first == ":", characters.dropFirst().first == ":" {
                parts.append(String(current))
                current = []
                characters = characters.dropFirst(2)
            } else {
                current.append(first)
                characters = characters.dropFirst()
            }
        }
        parts.append(String(current))
        return parts
    }
}
