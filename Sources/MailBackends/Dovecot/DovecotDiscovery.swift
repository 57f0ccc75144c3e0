internal import Curl
internal import ENSConfig
internal import ENSHTTP
internal import ENSStore
internal import Logging
internal import POSIX
internal import XML

/// Which registered server hosts a domain that no server lists (docs/dovecot.md,
/// "Discovery"): the domain's RFC 6186 SRV records (`_imaps._tcp`, then `_imap._tcp`),
/// then its Thunderbird-style autoconfig file. What they name counts only when it is a
/// registered server, same host and port: discovery decides which registered server
/// to try, never where a password may go. So a domain's owner, or whoever forges its DNS,
/// can at most send its own users' logins to a server ENS already trusts, which refuses
/// an account it does not have.
///
/// Answers are kept per responder thread for an hour (nothing found: ten minutes), so
/// a domain costs one lookup per thread and hour, not one per registration.
final class DovecotDiscovery {
    static let foundLifetime: UInt64 = 3_600_000
    static let notFoundLifetime: UInt64 = 600_000
    /// An autoconfig file is a few hundred bytes; anything much larger is not one.
    static let maximumAutoconfigBytes = 64 * 1024

    private let resolver: DNSResolver
    private let http: HTTPClient
    /// Domain → the name of the server found (nil: none), and when that expires.
    private var answers: [String: (server: String?, expires: UInt64)] = [:]

    init(settings: DovecotSettings, outbound: HTTPClientConfiguration) throws(CurlError) {
        resolver = settings.nameservers.isEmpty ? .system() : DNSResolver(nameservers: settings.nameservers)
        var configuration = outbound
        configuration.totalTimeout = .seconds(5)
        configuration.maximumResponseBytes = Self.maximumAutoconfigBytes
        configuration.lowSpeedBytesPerSecond = 1024
        configuration.lowSpeedTime = .seconds(2)
        http = try HTTPClient(configuration: configuration)
    }

    /// The registered server among `servers` that `domain`'s records name, if any.
    func server(forDomain domain: String, among servers: [DovecotServer], logger: Logger) -> DovecotServer? {
        let domain = domain.lowercased()
        let now = MonotonicClock.milliseconds()
        if let known = answers[domain], known.expires > now {
            return known.server.flatMap { name in servers.first { $0.name == name } }
        }
        if answers.count > 10_000 { answers = answers.filter { $0.value.expires > now } }
        let found = look(domain, among: servers, logger: logger)
        answers[domain] = (found?.name, now + (found == nil ? Self.notFoundLifetime : Self.foundLifetime))
        return found
    }

    private func look(_ domain: String, among servers: [DovecotServer], logger: Logger) -> DovecotServer? {
        func registered(_ host: String, _ port: Int) -> DovecotServer? {
            servers.first { $0.hostAndPort.host == host && $0.hostAndPort.port == port }
        }
        // The domain is the user's: it is not logged, only what was tried and found.
        for service in ["_imaps._tcp.", "_imap._tcp."] {
            do {
                let records = try resolver.srv(service + domain).sorted { $0.priority < $1.priority }
                if let match = records.lazy.compactMap({ registered($0.target, Int($0.port)) }).first {
                    logger.info("dovecot discovery: an SRV record names a registered server", metadata: ["dovecot.server": "\(match.name)"])
                    return match
                }
            } catch {
                logger.info("dovecot discovery: SRV lookup failed", metadata: ["error": "\(error)"])
            }
        }
        for url in Self.autoconfigURLs(domain: domain) {
            let response: HTTPResponse
            do {
                response = try http.send(HTTPRequest(method: .get, url: url, headers: [("Accept", "application/xml, text/xml")]))
            } catch {
                logger.info("dovecot discovery: autoconfig unreachable", metadata: ["error": "\(error.kind)"])
                continue
            }
            guard response.status == 200 else { continue }
            for server in Self.incomingIMAPServers(autoconfig: response.body, domain: domain) {
                if let match = registered(server.host, server.port) {
                    logger.info("dovecot discovery: an autoconfig file names a registered server", metadata: ["dovecot.server": "\(match.name)"])
                    return match
                }
            }
        }
        return nil
    }

    /// Where Thunderbird looks first for a domain's own configuration. No
    /// `emailaddress` parameter: the address is not ENS's to hand to a web server.
    static func autoconfigURLs(domain: String) -> [String] {
        ["https://autoconfig.\(domain)/mail/config-v1.1.xml", "https://\(domain)/.well-known/autoconfig/mail/config-v1.1.xml"]
    }

    /// The IMAP servers an autoconfig file (clientConfig 1.1) offers over TLS, in its
    /// order: `SSL` and `STARTTLS` socket types only (ENS never logs in in the clear).
    /// `%EMAILDOMAIN%` in a host name is the domain; anything not well-formed is nothing.
    static func incomingIMAPServers(autoconfig: [UInt8], domain: String) -> [(host: String, port: Int)] {
        guard let root = try? XMLTree.parse(autoconfig, limits: XMLTree.Limits(maximumBytes: maximumAutoconfigBytes)),
              root.name == "clientConfig", let provider = root.child("", "emailProvider") else { return [] }
        return provider.children("", "incomingServer").compactMap { server in
            guard server.attributes["type"] == "imap",
                  let socket = server.child("", "socketType")?.trimmedText, socket == "SSL" || socket == "STARTTLS",
                  let portText = server.child("", "port")?.trimmedText, let port = Int(portText), (1...65535).contains(port),
                  let hostname = server.child("", "hostname")?.trimmedText, !hostname.isEmpty else { return nil }
            let host = hostname.replacing("%EMAILDOMAIN%", with: domain).lowercased()
            return (host.hasSuffix(".") ? String(host.dropLast()) : host, port)
        }
    }
}

extension RequestContext {
    /// This thread's discovery (its resolver, its autoconfig client and what it found).
    func dovecotDiscovery() throws -> DovecotDiscovery {
        try threadState(DovecotDiscovery.self) {
            // The same outbound policy as Exchange's Autodiscover, which also fetches
            // from the web servers of the domains users name.
            let exchange = settings.exchange
            return try DovecotDiscovery(settings: settings.dovecot, outbound: HTTPClientConfiguration(
                caBundlePath: exchange.caFile, connectTo: exchange.connectTo,
                destinationPolicy: DestinationPolicy(allowedNetworks: exchange.allowedNetworks, allowedHostSuffixes: exchange.allowedHosts),
                proxy: exchange.proxy
            ))
        }
    }
}
