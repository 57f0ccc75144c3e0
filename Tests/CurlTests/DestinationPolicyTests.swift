import ENSTestSupport
import Curl
import Testing
import POSIX

/// What an attacker's `ewsUrl` or Autodiscover redirect may not reach, in every spelling
/// of an address that resolves to it.
@Suite struct DestinationPolicyTests {
    static func address(_ text: String) throws -> IPAddress { try #require(IPAddress(text), "\(text)") }

    @Test(arguments: [
        "127.0.0.1", "127.255.255.254", "0.0.0.0", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
        "169.254.169.254", "100.64.0.1", "224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1",
        "192.0.2.1", "198.51.100.7", "203.0.113.9", "198.18.0.1",
        "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "2001:db8::1",
        "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:7f00:1", "::127.0.0.1",
        "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "0:0:0:0:0:ffff:c0a8:0101",
    ])
    func specialAddressesAreRefused(text: String) throws {
        #expect(!DestinationPolicy().permits(try Self.address(text)), "\(text)")
    }

    @Test(arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:93.184.216.34", "64:ff9b::808:808"])
    func publicAddressesArePermitted(text: String) throws {
        #expect(DestinationPolicy().permits(try Self.address(text)), "\(text)")
    }

    @Test func listedNetworksArePermittedInEveryForm() throws {
        let policy = DestinationPolicy(allowedNetworks: [try #require(IPNetwork("127.0.0.0/8")), try #require(IPNetwork("::1/128"))])
        for text in ["127.0.0.1", "127.0.0.2", "::ffff:127.0.0.1", "::1"] {
            #expect(policy.permits(try Self.address(text)), "\(text)")
        }
        for text in ["10.0.0.1", "169.254.169.254", "::2", "fe80::1"] {
            #expect(!policy.permits(try Self.address(text)), "\(text)")
        }
    }

    @Test func networksParseAndMatch() throws {
        let network = try #require(IPNetwork("10.20.0.0/16"))
        #expect(network.contains(try Self.address("10.20.255.1")))
        #expect(!network.contains(try Self.address("10.21.0.1")))
        #expect(network.description == "10.20.0.0/16")
        let v6 = try #require(IPNetwork("2001:db8:abcd::/48"))
        #expect(v6.contains(try Self.address("2001:db8:abcd:1::5")))
        #expect(!v6.contains(try Self.address("2001:db8:abce::1")))
        for bad in ["10.0.0.0", "10.0.0.0/33", "::/129", "10.0.0/8", "010.0.0.0/8", "1.2.3.4/-1", "x/8", "1:2:3:4:5:6:7:8:9/64", ":::/8"] {
            #expect(IPNetwork(bad) == nil, "\(bad)")
        }
    }

    @Test func hostSuffixesMatchThemselvesAndSubdomainsOnly() {
        let policy = DestinationPolicy(allowedHostSuffixes: ["Example.com"])
        #expect(policy.permits(host: "example.com") && policy.permits(host: "mail.EXAMPLE.com"))
        #expect(!policy.permits(host: "badexample.com") && !policy.permits(host: "example.com.evil.test"))
        #expect(DestinationPolicy().permits(host: "anything.test"))
        #expect(!DestinationPolicy().lists(host: "anything.test") && policy.lists(host: "mail.example.com"))
    }

    /// Whether a forced registration's ewsUrl names the live subscription's server.
    @Test func urlsNameTheSameServerByHostAndEffectivePort() throws {
        let live = try #require(URLParts("https://Mail.Example.com/EWS/Exchange.asmx"))
        #expect(live.sameServer(as: try #require(URLParts("https://mail.example.com:443/ews/other"))))
        #expect(!live.sameServer(as: try #require(URLParts("https://mail.example.com:8443/EWS/Exchange.asmx"))))
        #expect(!live.sameServer(as: try #require(URLParts("http://mail.example.com/EWS/Exchange.asmx"))))
        #expect(!live.sameServer(as: try #require(URLParts("https://mail.example.com.evil.test/EWS/Exchange.asmx"))))
        let tricky = try #require(URLParts("https://mail.example.com@evil.test/EWS"))
        #expect(tricky.host == "evil.test" && tricky.hasUserInfo)
        #expect(try #require(URLParts("https://[::1]:8443/x")).host == "::1")
        #expect(URLParts("ftp://mail.example.com/") == nil && URLParts("https:///x") == nil)
    }

    /// URLParts reads bytes since it stopped walking Characters; on ASCII, where libcurl
    /// and a Character walk agree, it reads every URL as the Character reading did.
    @Test func urlPartsReadAsTheCharacterReadingDid() {
        struct Parts: Equatable { let scheme, host: String; let port: Int?; let userInfo: Bool }
        func reference(_ url: String) -> Parts? {
            let lowered = url.lowercased()
            let scheme: String
            if lowered.hasPrefix("https://") { scheme = "https" } else if lowered.hasPrefix("http://") { scheme = "http" } else { return nil }
            var authority = lowered.dropFirst(scheme.count + 3).prefix { $0 != "/" && $0 != "?" && $0 != "#" }
            let userInfo = authority.contains("@")
            if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
            let host: String, port: Int?
            if authority.hasPrefix("[") {
                guard let close = authority.firstIndex(of: "]") else { return nil }
                host = String(authority[authority.index(after: authority.startIndex)..<close])
                let after = authority[authority.index(after: close)...]
                if after.isEmpty { port = nil } else {
                    guard after.hasPrefix(":"), let number = Int(after.dropFirst()) else { return nil }
                    port = number
                }
            } else if let colon = authority.lastIndex(of: ":") {
                host = String(authority[..<colon])
                guard let number = Int(authority[authority.index(after: colon)...]) else { return nil }
                port = number
            } else {
                host = String(authority)
                port = nil
            }
            return host.isEmpty ? nil : Parts(scheme: scheme, host: host, port: port, userInfo: userInfo)
        }
        var generator = SeededGenerator(seed: 0x0421)
        let pieces = ["http", "HTTPS", "https", "://", ":", "/", "?", "#", "@", "[", "]", "::1", "443", "+8", "-1", "99999999999999999999",
                      "Mail.Example.COM", "evil.test", "x", "", "%40", "É"]
        for _ in 0..<20_000 {
            let url = (0..<Int.random(in: 1...8, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
            let parts = URLParts(url).map { Parts(scheme: $0.scheme, host: $0.host, port: $0.port, userInfo: $0.hasUserInfo) }
            #expect(parts == reference(url), "\(url)")
        }
    }
}
