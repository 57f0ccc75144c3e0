import ENSTestSupport
import Curl
import EWS
import Foundation
import POSIX
import Testing

/// The outbound guard without the test stack's allowance for loopback: an Exchange
/// client aimed (through DNS or CONNECT_TO) at a special address makes no connection at
/// all, and a listening socket on that address proves it.
@Suite(.serialized) struct OutboundGuardTests {
    /// A TCP listener on 127.0.0.1 that counts the connections it is offered.
    final class Listener {
        let fd: Int32
        let port: Int

        init() throws {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
            let listening = listen(descriptor, 16)
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self,
                                                                              capacity: 1) { getsockname(descriptor, $0, &length) } }
            fd = descriptor
            port = Int(UInt16(bigEndian: address.sin_port))
            try #require(bound == 0 && listening == 0)
        }

        deinit { close(fd) }

        /// Whether a connection is waiting within `milliseconds`.
        func offered(within milliseconds: Int32) -> Bool {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            return poll(&entry, 1, milliseconds) == 1
        }
    }

    static func client(listener: Listener, allowed: [String] = [], hosts: [String] = []) throws -> EWSClient {
        try EWSClient(configuration: EWSClientConfiguration(
            connectTo: ["mail.example.test:443:127.0.0.1:\(listener.port)", "meta.example.test:443:169.254.169.254:443"],
            connectTimeout: .milliseconds(500), totalTimeout: .seconds(1),
            destinationPolicy: DestinationPolicy(allowedNetworks: allowed.compactMap(IPNetwork.init), allowedHostSuffixes: hosts)
        ))
    }

    static let credentials = EWSCredentials(method: .basic(userName: "u", password: "p"), mailbox: "u@example.test")

    @Test func loopbackIsRefusedBeforeAnyConnection() throws {
        let listener = try Listener()
        let client = try Self.client(listener: listener)
        #expect(throws: EWSError.self) {
            _ = try client.inboxUnreadCount(ewsURL: "https://mail.example.test/EWS/Exchange.asmx", credentials: Self.credentials,
                                            version: .default, timeout: .seconds(1))
        }
        do {
            _ = try client.inboxUnreadCount(ewsURL: "https://mail.example.test/EWS/Exchange.asmx", credentials: Self.credentials,
                                            version: .default, timeout: .seconds(1))
        } catch {
            #expect("\(error)".contains("127.0.0.1 is not a permitted address"), "\(error)")
        }
        #expect(!listener.offered(within: 200))
    }

    /// The metadata address is refused in the callback, before libcurl has a socket;
    /// nothing is ever sent toward it.
    @Test func cloudMetadataIsRefused() throws {
        let listener = try Listener()
        let client = try Self.client(listener: listener)
        do {
            _ = try client.inboxUnreadCount(ewsURL: "https://meta.example.test/EWS/Exchange.asmx", credentials: Self.credentials,
                                            version: .default, timeout: .seconds(1))
            Issue.record("expected a refusal")
        } catch {
            #expect("\(error)".contains("169.254.169.254 is not a permitted address"), "\(error)")
        }
    }

    @Test func anAllowedNetworkIsReached() throws {
        let listener = try Listener()
        let client = try Self.client(listener: listener, allowed: ["127.0.0.0/8"])
        // Not a TLS server, so the request fails, but only after connecting.
        #expect(throws: EWSError.self) {
            _ = try client.inboxUnreadCount(ewsURL: "https://mail.example.test/EWS/Exchange.asmx", credentials: Self.credentials,
                                            version: .default, timeout: .seconds(1))
        }
        #expect(listener.offered(within: 1000))
    }

    @Test func urlsTheyCannotDisguise() throws {
        let listener = try Listener()
        // Refused at the URL, before any lookup: a port other than the scheme's (unless
        // the host is listed), user info, another scheme, and with a host list anything
        // not on it.
        let open = try Self.client(listener: listener, allowed: ["127.0.0.0/8"])
        let listed = try Self.client(listener: listener, allowed: ["127.0.0.0/8"], hosts: ["example.test"])
        for (client, url) in [(open, "https://mail.example.test:8443/EWS/Exchange.asmx"),
                              (open, "https://user:pw@mail.example.test/EWS/Exchange.asmx"),
                              (open, "ftp://mail.example.test/x"), (listed, "https://mail.elsewhere.test/EWS/Exchange.asmx"),
                              (listed, "https://example.test.evil.test/EWS")] {
            do {
                _ = try client.inboxUnreadCount(ewsURL: url, credentials: Self.credentials, version: .default, timeout: .seconds(1))
                Issue.record("expected a refusal for \(url)")
            } catch {
                #expect("\(error)".contains("refused"), "\(url): \(error)")
            }
        }
        #expect(!listener.offered(within: 100))
    }

    /// A header value with CR/LF (an OAuth token, an address) cannot add headers.
    @Test func headerInjectionIsRefusedBeforeSending() throws {
        let listener = try Listener()
        let client = try Self.client(listener: listener, allowed: ["127.0.0.0/8"])
        for credentials in [EWSCredentials(method: .oauth(accessToken: "abc\r\nX-Evil: 1"), mailbox: "u@example.test"),
                            EWSCredentials(method: .oauth(accessToken: "abc"), mailbox: "u@example.test\r\nX-Evil: 1"),
                            EWSCredentials(method: .oauth(accessToken: "a\u{0}b"), mailbox: "u@example.test")] {
            do {
                _ = try client.inboxUnreadCount(ewsURL: "https://mail.example.test/EWS/Exchange.asmx", credentials: credentials,
                                                version: .default, timeout: .seconds(1))
                Issue.record("expected a refusal")
            } catch {
                #expect("\(error)".contains("control characters"), "\(error)")
            }
        }
        #expect(!listener.offered(within: 100))
    }

    /// A spent budget sends nothing more.
    @Test func aSpentBudgetSendsNothing() throws {
        let listener = try Listener()
        let client = try Self.client(listener: listener, allowed: ["127.0.0.0/8"])
        client.withDeadline(.zero) {
            do {
                _ = try client.inboxUnreadCount(ewsURL: "https://mail.example.test/EWS/Exchange.asmx", credentials: Self.credentials,
                                                version: .default, timeout: .seconds(1))
                Issue.record("expected a refusal")
            } catch {
                #expect("\(error)".contains("budget"), "\(error)")
            }
        }
        #expect(!listener.offered(within: 100))
    }
}
