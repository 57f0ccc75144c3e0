public import ENSModel
public import Curl
internal import OpenSSL
public import POSIX
internal import XML

/// Where and how ENS reaches Exchange servers.
public struct EWSClientConfiguration: Sendable {
    /// PEM CA bundle; nil uses the system store. Verification is always on.
    public var caBundlePath: String?
    /// libcurl CONNECT_TO entries (tests point every Exchange host at the simulator).
    public var connectTo: [String]
    public var connectTimeout: Duration
    public var totalTimeout: Duration
    /// Where Exchange traffic may go (docs/security.md, "Outbound requests").
    public var destinationPolicy: DestinationPolicy
    /// The operator's HTTP proxy (`exchange.proxy`); nil: none, whatever the
    /// environment says. The policy still applies to the destination behind it.
    public var proxy: String?

    /// EWS and Autodiscover answers are small; a larger one is cut off as it arrives.
    public static let maximumResponseBytes = 1 << 20

    public init(caBundlePath: String? = nil, connectTo: [String] = [], connectTimeout: Duration = .seconds(3), totalTimeout: Duration = .seconds(10),
                destinationPolicy: DestinationPolicy = DestinationPolicy(), proxy: String? = nil) {
        self.proxy = proxy
        self.caBundlePath = caBundlePath
        self.connectTo = connectTo
        self.connectTimeout = connectTimeout
        self.totalTimeout = totalTimeout
        self.destinationPolicy = destinationPolicy
    }
}

/// An Exchange failure. Descriptions are log-safe: codes and statuses, never bodies,
/// credentials or addresses.
public enum EWSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// HTTP 401 or 403: the credentials were refused.
    case unauthorized(status: Int)
    /// No HTTP answer: DNS, connect, TLS or timeout (libcurl's reason).
    case transport(String)
    /// Not sent, or cut off: a destination the policy refuses, the budget spent, an
    /// answer over the size limit, a header with control characters.
    case refused(String)
    /// An HTTP status other than 200 and the ones above.
    case httpStatus(Int)
    /// A SOAP Fault, by its EWS ResponseCode.
    case fault(String)
    /// A response message with ResponseClass="Error", by its ResponseCode.
    case responseError(String)
    /// A 200 answer that is not the expected document.
    case malformed(String)

    public var description: String {
        switch self {
        case .unauthorized(let status): "Exchange refused the credentials (HTTP \(status))"
        case .transport(let reason): "Exchange unreachable: \(reason)"
        case .refused(let reason): "Exchange request refused: \(reason)"
        case .httpStatus(let status): "Exchange answered HTTP \(status)"
        case .fault(let code): "Exchange SOAP fault \(code)"
        case .responseError(let code): "Exchange error \(code)"
        case .malformed(let reason): "unexpected Exchange answer: \(reason)"
        }
    }

    /// The server does not know the RequestServerVersion we sent: try an older one.
    public var isInvalidServerVersion: Bool {
        self == .fault("ErrorInvalidServerVersion") || self == .responseError("ErrorInvalidServerVersion")
    }
}

/// A new push subscription, as Exchange answered it (both values are opaque).
public struct PushSubscription: Sendable, Equatable {
    public let id: String
    public let watermark: String
    public let version: EWSVersion
}

/// EWS operations over one reused libcurl handle (kept-alive connections). One thread
/// at a time, like the `HTTPClient` it owns; each responder thread has its own.
public final class EWSClient {
    let http: HTTPClient
    public let configuration: EWSClientConfiguration
    /// The budget of the operation under way (`withDeadline`): every request it makes
    /// gets at most the time left.
    private(set) var deadline: Deadline?

    public init(configuration: EWSClientConfiguration) throws(CurlError) {
        self.configuration = configuration
        http = try HTTPClient(configuration: HTTPClientConfiguration(
            caBundlePath: configuration.caBundlePath,
            connectTimeout: configuration.connectTimeout,
            totalTimeout: configuration.totalTimeout,
            preferHTTP2: false,
            connectTo: configuration.connectTo,
            destinationPolicy: configuration.destinationPolicy,
            maximumResponseBytes: EWSClientConfiguration.maximumResponseBytes,
            // A peer that dribbles (a tarpit) is dropped after 8 s under 64 bytes/s,
            // whatever time the budget still has.
            lowSpeedBytesPerSecond: 64, lowSpeedTime: .seconds(8),
            proxy: configuration.proxy
        ))
    }

    /// Runs `body` with every request it makes bounded by one wall-clock `budget` in
    /// all (a registration's Autodiscover hops and Subscribe attempts; a callback's
    /// GetItem and GetFolder). Inside another budget, the shorter holds.
    public func withDeadline<T, E: Error>(_ budget: Duration, _ body: () throws(E) -> T) throws(E) -> T {
        let outer = deadline
        let mine = Deadline.after(budget)
        deadline = outer.map { $0.remainingMilliseconds < budget.wholeMilliseconds ? $0 : mine } ?? mine
        defer { deadline = outer }
        return try body()
    }

    /// Which connections a request may use (HTTPRequest.connectionKey). A client
    /// certificate authenticates the TLS connection itself, so such a connection serves
    /// that certificate only. Basic and Bearer credentials authenticate each request on
    /// its own (and header values cannot carry CR/LF, so no request can add to or split
    /// another); those requests share kept-alive connections, but never with a
    /// certificate's or with the uncredentialed Autodiscover step. (Measured: a fresh
    /// connection per user halves B6 against the Exchange simulator.)
    static func connectionKey(_ credentials: EWSCredentials?) -> [UInt8] {
        guard let credentials else { return [0] }
        switch credentials.method {
        case .basic, .oauth: return [1]  // (a token endpoint's requests: `tokenEndpointConnection`)
        case .certificate(let identity): return Digest.sha256(identity.certificateDER)
        }
    }

    // MARK: Transport

    /// POSTs an XML document with the credentials; 401/403 become `.unauthorized`.
    ///
    /// `challengeFirst`: a password or token goes only to a server that asks for it
    /// (docs/security.md, "Credentials go only where a challenge asks"). The document
    /// is sent without them first; only a 401 whose `WWW-Authenticate` offers the
    /// credentials' scheme (Basic, Bearer) gets them, in a second request. Any other
    /// answer to the first (a 200, a redirect, a 401 for another scheme) is returned
    /// as it is, no credentials sent, and never `.unauthorized`. Used wherever ENS
    /// speaks to a server the credentials were not yet proven at (Autodiscover, the
    /// proof of possession); a client certificate is asked for by TLS itself.
    func post(_ url: String, body: [UInt8], credentials: EWSCredentials?, timeout: Duration? = nil,
              extraHeaders: [(String, String)] = [], challengeFirst: Bool = false) throws(EWSError) -> HTTPResponse {
        if challengeFirst, let credentials, let scheme = credentials.scheme {
            // Credentials that could never be sent send nothing at all, not even the
            // uncredentialed first request.
            guard credentials.headers.allSatisfy({ HTTPClient.isHeaderSafe($0.1) }) else {
                throw .refused("a header name or value contains control characters")
            }
            let first = try post(url, body: body, credentials: nil, timeout: timeout, extraHeaders: extraHeaders, refusalsAnswered: true)
            guard first.status == 401, Self.challenges(first.header("WWW-Authenticate"), for: scheme) else { return first }
        }
        return try post(url, body: body, credentials: credentials, timeout: timeout, extraHeaders: extraHeaders, refusalsAnswered: false)
    }

    /// Whether a `WWW-Authenticate` value offers `scheme` (RFC 9110: a list of
    /// challenges, each a case-insensitive scheme name and its parameters).
    static func challenges(_ header: String?, for scheme: String) -> Bool {
        guard let header else { return false }
        return header.split(separator: ",").contains { part in
            part.trimmingCharacters(in: " \t").split(separator: " ", maxSplits: 1).first.map { $0.lowercased() == scheme.lowercased() } ?? false
        }
    }

    /// `refusalsAnswered`: a 401/403 is returned rather than thrown (the uncredentialed
    /// first request of `challengeFirst`).
    private func post(_ url: String, body: [UInt8], credentials: EWSCredentials?, timeout: Duration?, extraHeaders: [(String, String)],
                      refusalsAnswered: Bool) throws(EWSError) -> HTTPResponse {
        var headers = [("Content-Type", "text/xml; charset=utf-8"), ("Accept", "text/xml"), ("User-Agent", "ENS/1")] + extraHeaders
        var certificate: ClientCertificate?
        if let credentials {
            headers += credentials.headers
            if case .certificate(let identity) = credentials.method {
                certificate = ClientCertificate(certificatePEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
            }
        }
        let response: HTTPResponse
        do {
            response = try http.send(HTTPRequest(method: .post, url: url, headers: headers, body: body, clientCertificate: certificate,
                                                 connectionKey: Self.connectionKey(credentials)),
                                     totalTimeout: timeout, deadline: deadline)
        } catch {
            throw Self.error(error)
        }
        if !refusalsAnswered && (response.status == 401 || response.status == 403) { throw .unauthorized(status: response.status) }
        return response
    }

    /// A plain GET without credentials and without following redirects (Autodiscover's
    /// HTTP-redirect step: never send credentials over plain HTTP).
    func getWithoutCredentials(_ url: String) throws(EWSError) -> HTTPResponse {
        do {
            return try http.send(HTTPRequest(method: .get, url: url, headers: [("User-Agent", "ENS/1")], connectionKey: Self.connectionKey(nil)),
                                 deadline: deadline)
        } catch {
            throw Self.error(error)
        }
    }

    private static func error(_ error: CurlError) -> EWSError {
        switch error.kind {
        case .destinationRefused, .invalidRequest, .budgetExhausted, .responseTooLarge: .refused(error.description)
        default: .transport(error.description)
        }
    }

    /// Sends one EWS operation and returns the operation's response element
    /// (`<m:XResponse>`), or the SOAP fault / HTTP failure as an error.
    private func call(_ url: String, _ credentials: EWSCredentials, _ version: EWSVersion, operation: String, body: String,
                      timeout: Duration? = nil, challengeFirst: Bool = false) throws(EWSError) -> XMLTreeElement {
        let response = try post(url, body: SOAP.ewsEnvelope(version: version, body: body), credentials: credentials, timeout: timeout,
                                challengeFirst: challengeFirst)
        let envelope: XMLTreeElement
        do {
            envelope = try XMLTree.parse(response.body)
        } catch {
            throw response.status == 200 ? .malformed(error.description) : .httpStatus(response.status)
        }
        guard let body = SOAP.body(of: envelope) else {
            throw response.status == 200 ? .malformed("not a SOAP envelope") : .httpStatus(response.status)
        }
        if let fault = SOAP.faultCode(body) { throw .fault(fault) }
        guard response.status == 200 else { throw .httpStatus(response.status) }
        guard let result = body.child(Namespace.messages, operation + "Response") else {
            throw .malformed("no \(operation)Response")
        }
        return result
    }

    /// The response messages of an operation answer, each checked for ResponseClass.
    private static func messages(_ response: XMLTreeElement, _ name: String) -> [Result<XMLTreeElement, EWSError>] {
        let messages = response.child(Namespace.messages, "ResponseMessages")?.children(Namespace.messages, name) ?? []
        return messages.map { message in
            if message.attributes["ResponseClass"] == "Error" {
                return .failure(.responseError(message.child(Namespace.messages, "ResponseCode")?.trimmedText ?? "unknown"))
            }
            return .success(message)
        }
    }

    // MARK: Operations

    /// Creates a push subscription on the Inbox for new mail. Starts with `version` and
    /// falls back to older versions while the server refuses the version.
    public func subscribe(ewsURL: String, credentials: EWSCredentials, version: EWSVersion, callbackURL: String,
                          statusFrequencyMinutes: Int) throws(EWSError) -> PushSubscription {
        var version = version
        while true {
            do {
                return try subscribeOnce(ewsURL, credentials, version, callbackURL, statusFrequencyMinutes)
            } catch where error.isInvalidServerVersion {
                guard let older = version.older else { throw error }
                version = older
            }
        }
    }

    private func subscribeOnce(_ url: String, _ credentials: EWSCredentials, _ version: EWSVersion, _ callbackURL: String,
                               _ frequency: Int) throws(EWSError) -> PushSubscription {
        // Element order matters (schema sequence): FolderIds, EventTypes, Watermark,
        // StatusFrequency, URL. StatusEvent cannot be subscribed to; heartbeats come anyway.
        let body = """
            <m:Subscribe><m:PushSubscriptionRequest>\
            <t:FolderIds><t:DistinguishedFolderId Id="inbox"/></t:FolderIds>\
            <t:EventTypes><t:EventType>NewMailEvent</t:EventType></t:EventTypes>\
            <t:StatusFrequency>\(frequency)</t:StatusFrequency>\
            <t:URL>\(SOAP.escape(callbackURL))</t:URL>\
            </m:PushSubscriptionRequest></m:Subscribe>
            """
        let response = try call(url, credentials, version, operation: "Subscribe", body: body)
        guard let first = Self.messages(response, "SubscribeResponseMessage").first else { throw .malformed("no SubscribeResponseMessage") }
        let message = try first.get()
        guard let id = message.child(Namespace.messages, "SubscriptionId")?.trimmedText, !id.isEmpty,
              let watermark = message.child(Namespace.messages, "Watermark")?.trimmedText else {
            throw .malformed("SubscribeResponseMessage without SubscriptionId or Watermark")
        }
        return PushSubscription(id: id, watermark: watermark, version: version)
    }

    /// Subject and sender of new messages (GetItem). Items Exchange cannot find (deleted
    /// meanwhile) are left out.
    public func messages(ewsURL: String, credentials: EWSCredentials, version: EWSVersion, itemIDs: [String],
                         timeout: Duration) throws(EWSError) -> [MailSummary] {
        let ids = itemIDs.map { "<t:ItemId Id=\"\(SOAP.escape($0))\"/>" }.joined()
        let body = """
            <m:GetItem><m:ItemShape><t:BaseShape>IdOnly</t:BaseShape><t:AdditionalProperties>\
            <t:FieldURI FieldURI="item:Subject"/><t:FieldURI FieldURI="message:From"/>\
            </t:AdditionalProperties></m:ItemShape><m:ItemIds>\(ids)</m:ItemIds></m:GetItem>
            """
        let response = try call(ewsURL, credentials, version, operation: "GetItem", body: body, timeout: timeout)
        var summaries: [MailSummary] = []
        for case .success(let message) in Self.messages(response, "GetItemResponseMessage") {
            guard let item = message.child(Namespace.messages, "Items")?.children.first,
                  let id = item.child(Namespace.types, "ItemId")?.attributes["Id"] else { continue }
            let sender = item.path(Namespace.types, "From", "Mailbox")
            let name = sender?.child(Namespace.types, "Name")?.trimmedText
            summaries.append(MailSummary(
                itemID: id, subject: item.child(Namespace.types, "Subject")?.trimmedText ?? "",
                senderName: (name?.isEmpty == false ? name : sender?.child(Namespace.types, "EmailAddress")?.trimmedText) ?? ""
            ))
        }
        return summaries
    }

    /// The Inbox's unread count (GetFolder), for badges. With `mailbox`, the Inbox of
    /// that address: Exchange answers only if the credentials may open that mailbox
    /// (ErrorAccessDenied or ErrorNonExistentMailbox otherwise), which is how a
    /// registration proves its credentials belong to the mailbox it names.
    /// `challengeFirst`: the proof of possession, the first request with these
    /// credentials at this server (see `post`).
    public func inboxUnreadCount(ewsURL: String, credentials: EWSCredentials, version: EWSVersion, mailbox: String? = nil,
                                 timeout: Duration, challengeFirst: Bool = false) throws(EWSError) -> Int {
        let folder = mailbox.map {
            "<t:DistinguishedFolderId Id=\"inbox\">" +
            "<t:Mailbox><t:EmailAddress>\(SOAP.escape($0))</t:EmailAddress></t:Mailbox></t:DistinguishedFolderId>"
        } ?? "<t:DistinguishedFolderId Id=\"inbox\"/>"
        let body = """
            <m:GetFolder><m:FolderShape><t:BaseShape>IdOnly</t:BaseShape><t:AdditionalProperties>\
            <t:FieldURI FieldURI="folder:UnreadCount"/></t:AdditionalProperties></m:FolderShape>\
            <m:FolderIds>\(folder)</m:FolderIds></m:GetFolder>
            """
        let response = try call(ewsURL, credentials, version, operation: "GetFolder", body: body, timeout: timeout, challengeFirst: challengeFirst)
        guard let first = Self.messages(response, "GetFolderResponseMessage").first else { throw .malformed("no GetFolderResponseMessage") }
        guard let count = try first.get().path(Namespace.messages, "Folders")?.children.first?
            .child(Namespace.types, "UnreadCount").flatMap({ Int($0.trimmedText) }) else {
            throw .malformed("GetFolder answer without UnreadCount")
        }
        return count
    }
}
