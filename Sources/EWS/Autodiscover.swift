internal import Curl
internal import POSIX
internal import XML

/// What Autodiscover found for an address.
public enum AutodiscoverResult: Sendable, Equatable {
    /// `trusted`: found over https without the plain-HTTP redirect step (or at a host
    /// the operator lists): fit to cache for the domain and to vouch for an endpoint.
    case found(ewsURL: String, trusted: Bool)
    /// Every server that answered refused the credentials (and none gave settings).
    case unauthorized
    case notFound
}

/// Finds a mailbox's EWS URL the way Outlook does (docs/exchange.md, "Autodiscover"):
/// POX and SOAP endpoints on the domain and on `autodiscover.<domain>`, then the
/// unauthenticated plain-HTTP redirect; follows redirectAddr / redirectUrl / HTTP
/// redirects to https targets only, at most 10 of them, never the same one twice.
/// The SCP (Active Directory) and DNS SRV steps are not implemented.
///
/// Credentials go only where they are asked for: each candidate is asked without them
/// first, and gets them only after a 401 that challenges for their scheme; a candidate
/// learned over plain HTTP gets no password or token (unless its host is on
/// `exchange.allowed_hosts`; a client certificate, which hands over no secret, may go);
/// and the first candidate that refuses them ends the search (`.unauthorized`), so a
/// wrong password costs its account one failed login per registration, not one per
/// candidate.
public struct Autodiscover {
    public static let maximumRedirects = 10

    let client: EWSClient

    public init(client: EWSClient) {
        self.client = client
    }

    enum Kind { case pox, soap }

    /// What one endpoint answered.
    enum Answer: Equatable {
        case settings(ewsURL: String)
        case redirectAddress(String)
        case redirectURL(String)
        case unauthorized
        case nothing
    }

    public func discover(email: String, credentials: EWSCredentials) -> AutodiscoverResult {
        var address = email
        var redirects = 0
        var seenAddresses: Set<String> = [email.lowercased()]
        var seenURLs: Set<String> = []
        // Whether every step so far was https: the plain-HTTP redirect can be forged by
        // anyone on the path, so what it leads to is used once, never cached or trusted.
        var overHTTPSOnly = true

        addresses: while true {
            guard let domain = Self.domain(of: address) else { return .notFound }
            var candidates: [(String, Kind)] = [
                ("https://\(domain)/autodiscover/autodiscover.xml", .pox),
                ("https://autodiscover.\(domain)/autodiscover/autodiscover.xml", .pox),
                ("https://autodiscover.\(domain)/autodiscover/autodiscover.svc", .soap),
                ("https://\(domain)/autodiscover/autodiscover.svc", .soap),
            ]
            // What the plain-HTTP step named, and where it redirects: anyone on the path
            // could have chosen it, so no password or token goes there unless the operator
            // lists it. (A client certificate hands over no secret: TLS proves it.)
            func mayPresent(_ url: String) -> Bool {
                overHTTPSOnly || credentials.scheme == nil
                    || (URLParts(url).map { client.configuration.destinationPolicy.lists(host: $0.host) } ?? false)
            }
            var triedHTTPRedirect = false
            while true {
                if candidates.isEmpty {
                    // Last resort: a plain-HTTP GET that may redirect to the real endpoint.
                    // No credentials go over it, and its redirect is not followed blindly.
                    guard !triedHTTPRedirect else { break addresses }
                    triedHTTPRedirect = true
                    guard let target = httpRedirectTarget(domain: domain), redirects < Self.maximumRedirects,
                          !seenURLs.contains(target) else { break addresses }
                    redirects += 1
                    overHTTPSOnly = false
                    candidates.append((target, .pox))
                    continue
                }
                let (url, kind) = candidates.removeFirst()
                seenURLs.insert(url)
                switch ask(url, kind, address: address, credentials: mayPresent(url) ? credentials : nil,
                           redirects: &redirects, seenURLs: &seenURLs) {
                case .settings(let ewsURL):
                    let listed = URLParts(ewsURL).map { client.configuration.destinationPolicy.lists(host: $0.host) } ?? false
                    return .found(ewsURL: ewsURL, trusted: overHTTPSOnly || listed)
                case .redirectAddress(let next):
                    guard redirects < Self.maximumRedirects, seenAddresses.insert(next.lowercased()).inserted else { return .notFound }
                    redirects += 1
                    address = next
                    continue addresses
                case .redirectURL(let next):
                    guard redirects < Self.maximumRedirects, Self.isHTTPS(next), !seenURLs.contains(next) else { continue }
                    redirects += 1
                    candidates.insert((next, kind), at: 0)
                case .unauthorized:
                    // A server that challenged for the credentials refused them: asking
                    // the next would only cost the account another failed login.
                    return .unauthorized
                case .nothing:
                    continue
                }
            }
        }
        return .notFound
    }

    /// Asks one endpoint, following HTTP 301/302 to https targets not seen before.
    private func ask(_ url: String, _ kind: Kind, address: String, credentials: EWSCredentials?,
                     redirects: inout Int, seenURLs: inout Set<String>) -> Answer {
        var url = url
        while true {
            let response: HTTPResponseSummary
            do {
                let raw = try client.post(url, body: kind == .pox ? Self.poxRequest(address) : Self.soapRequest(address, url: url),
                                          credentials: credentials, extraHeaders: kind == .soap ? [("SOAPAction", Self.soapAction)] : [],
                                          challengeFirst: true)
                response = HTTPResponseSummary(status: raw.status, location: raw.header("Location"), body: raw.body)
            } catch .unauthorized {
                // Only a refusal of credentials presented is one; without them it is a
                // server that would not answer us.
                return credentials == nil ? .nothing : .unauthorized
            } catch {
                return .nothing
            }
            if response.status == 301 || response.status == 302 {
                guard let location = response.location, Self.isHTTPS(location), redirects < Self.maximumRedirects,
                      seenURLs.insert(location).inserted else { return .nothing }
                redirects += 1
                url = location
                continue
            }
            guard response.status == 200, let document = try? XMLTree.parse(response.body) else { return .nothing }
            return kind == .pox ? Self.readPOX(document) : Self.readSOAP(document)
        }
    }

    private struct HTTPResponseSummary {
        let status: Int
        let location: String?
        let body: [UInt8]
    }

    private func httpRedirectTarget(domain: String) -> String? {
        guard let response = try? client.getWithoutCredentials("http://autodiscover.\(domain)/autodiscover/autodiscover.xml"),
              response.status == 301 || response.status == 302,
              let location = response.header("Location"), Self.isHTTPS(location) else { return nil }
        return location
    }

    // MARK: Documents

    static let soapAction = "http://schemas.microsoft.com/exchange/2010/Autodiscover/Autodiscover/GetUserSettings"

    static func poxRequest(_ address: String) -> [UInt8] {
        Array("""
            <?xml version="1.0" encoding="utf-8"?>
            <Autodiscover xmlns="\(Namespace.poxRequest)"><Request>\
            <EMailAddress>\(SOAP.escape(address))</EMailAddress>\
            <AcceptableResponseSchema>\(Namespace.poxOutlookResponse)</AcceptableResponseSchema>\
            </Request></Autodiscover>
            """.utf8)
    }

    static func soapRequest(_ address: String, url: String) -> [UInt8] {
        Array("""
            <?xml version="1.0" encoding="utf-8"?>
            <soap:Envelope xmlns:soap="\(Namespace.soap)" xmlns:a="\(Namespace.autodiscover)" xmlns:wsa="\(Namespace.addressing)">\
            <soap:Header><a:RequestedServerVersion>Exchange2010</a:RequestedServerVersion>\
            <wsa:Action>\(soapAction)</wsa:Action><wsa:To>\(SOAP.escape(url))</wsa:To></soap:Header>\
            <soap:Body><a:GetUserSettingsRequestMessage><a:Request>\
            <a:Users><a:User><a:Mailbox>\(SOAP.escape(address))</a:Mailbox></a:User></a:Users>\
            <a:RequestedSettings><a:Setting>ExternalEwsUrl</a:Setting><a:Setting>InternalEwsUrl</a:Setting></a:RequestedSettings>\
            </a:Request></a:GetUserSettingsRequestMessage></soap:Body></soap:Envelope>
            """.utf8)
    }

    /// A POX answer: settings (EwsUrl, preferring the external EXPR block; ASUrl on
    /// Exchange 2007), a redirect, or nothing (an Error response).
    static func readPOX(_ document: XMLTreeElement) -> Answer {
        guard document.namespace == Namespace.poxResponse, document.name == "Autodiscover",
              let account = document.path(Namespace.poxOutlookResponse, "Response", "Account") else { return .nothing }
        let ns = Namespace.poxOutlookResponse
        let action = account.child(ns, "Action")?.trimmedText.lowercased()
        // The element is spelt RedirectUrl and RedirectURL in the wild.
        func redirect(_ name: String) -> String? {
            account.children.first { $0.namespace == ns && $0.name.lowercased() == name }?.trimmedText
        }
        if action == "redirectaddr", let target = redirect("redirectaddr"), target.contains("@") { return .redirectAddress(target) }
        if action == "redirecturl", let target = redirect("redirecturl") { return .redirectURL(target) }
        let protocols = account.children(ns, "Protocol")
        func url(_ type: String, _ element: String) -> String? {
            protocols.first { $0.child(ns, "Type")?.trimmedText == type }?.child(ns, element)?.trimmedText
        }
        let candidates = [url("EXPR", "EwsUrl"), url("EXCH", "EwsUrl"), url("EXPR", "ASUrl"), url("EXCH", "ASUrl")]
        guard let found = candidates.compactMap({ $0 }).first(where: isHTTPS) else { return .nothing }
        return .settings(ewsURL: found)
    }

    /// A SOAP GetUserSettings answer: ExternalEwsUrl (InternalEwsUrl as a fallback), or
    /// a RedirectAddress / RedirectUrl.
    static func readSOAP(_ document: XMLTreeElement) -> Answer {
        let ns = Namespace.autodiscover
        guard let response = SOAP.body(of: document)?.path(ns, "GetUserSettingsResponseMessage", "Response"),
              response.child(ns, "ErrorCode")?.trimmedText == "NoError",
              let user = response.path(ns, "UserResponses", "UserResponse") else { return .nothing }
        let target = user.child(ns, "RedirectTarget")?.trimmedText ?? ""
        switch user.child(ns, "ErrorCode")?.trimmedText {
        case "NoError":
            var settings: [String: String] = [:]
            for setting in user.path(ns, "UserSettings")?.children(ns, "UserSetting") ?? [] {
                if let name = setting.child(ns, "Name")?.trimmedText, let value = setting.child(ns, "Value")?.trimmedText { settings[name] = value }
            }
            guard let found = [settings["ExternalEwsUrl"],
                               settings["InternalEwsUrl"]].compactMap({ $0 }).first(where: isHTTPS) else { return .nothing }
            return .settings(ewsURL: found)
        case "RedirectAddress" where target.contains("@"): return .redirectAddress(target)
        case "RedirectUrl" where !target.isEmpty: return .redirectURL(target)
        default: return .nothing
        }
    }

    /// Where credentials may go: an https URL (nothing else is ever followed or used).
    public static func isHTTPS(_ url: String) -> Bool {
        url.lowercased().hasPrefix("https://") && url.utf8.count > 8 && !url.contains(where: { $0 == " " || $0.isNewline })
    }

    /// The lowercased domain of an address, if it looks like one (a DNS name).
    public static func domain(of address: String) -> String? {
        guard let at = address.lastIndex(of: "@") else { return nil }
        let domain = address[address.index(after: at)...].lowercased()
        guard !domain.isEmpty, domain.utf8.count <= 253, !domain.hasPrefix("."), !domain.hasSuffix("."), !domain.contains(".."),
              domain.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E }) else { return nil }
        return domain
    }
}
