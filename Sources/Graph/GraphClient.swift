public import Curl
internal import Codecs
public import ENSModel
internal import OpenSSL
public import POSIX

/// Where and how ENS reaches Microsoft Graph and the identity platform.
public struct GraphClientConfiguration: Sendable {
    /// Graph's base URL, without /v1.0 (https://graph.microsoft.com; tests: the simulator).
    public var graphURL: String
    /// The identity platform's base URL (https://login.microsoftonline.com).
    public var loginURL: String
    /// PEM CA bundle; nil uses the system store. Verification is always on.
    public var caBundlePath: String?
    /// One request's limit (a subscription's create waits for Graph to validate both
    /// notification URLs, each of which it gives 10 s).
    public var timeout: Duration

    public init(graphURL: String = "https://graph.microsoft.com", loginURL: String = "https://login.microsoftonline.com",
                caBundlePath: String? = nil, timeout: Duration = .seconds(10)) {
        self.graphURL = graphURL
        self.loginURL = loginURL
        self.caBundlePath = caBundlePath
        self.timeout = timeout
    }
}

/// The signed-in user a delegated token belongs to.
public struct GraphUser: Sendable, Equatable {
    public let id: String
    /// `mail` and `userPrincipalName`: a mailbox is the user's if it is either.
    public let addresses: [String]

    public func owns(mailbox: String) -> Bool {
        addresses.contains { $0.lowercased() == mailbox.lowercased() }
    }
}

/// A subscription as Graph answered it.
public struct GraphSubscription: Sendable, Equatable {
    public let id: String
    public let resource: String
    public let expiresAt: Timestamp
    public let clientState: String?
}

/// What a new subscription asks for: new messages in one user's Inbox, notifications
/// and lifecycle events to `notificationURL`, immutable message ids.
public struct SubscriptionRequest: Sendable {
    public let userPath: String
    public let notificationURL: String
    public let clientState: String
    public let expiresAt: Timestamp
    /// For a rich subscription (`blind` mode): the properties Graph puts into each
    /// notification and the certificate it encrypts them to.
    public let encryption: RichNotifications?

    public init(userPath: String, notificationURL: String, clientState: String, expiresAt: Timestamp, encryption: RichNotifications? = nil) {
        self.userPath = userPath
        self.notificationURL = notificationURL
        self.clientState = clientState
        self.expiresAt = expiresAt
        self.encryption = encryption
    }

    /// Graph's resource path for the user's Inbox messages (with `$select` for a rich
    /// subscription, which Graph requires).
    public var resource: String {
        let inbox = "\(userPath)/mailFolders('inbox')/messages"
        guard let encryption else { return inbox }
        return inbox + "?$select=" + encryption.selected.joined(separator: ",")
    }
}

/// What a rich subscription adds (includeResourceData): Graph encrypts the `selected`
/// properties of each new message to `certificate` (DER X.509 of an RSA key) and names
/// it by `certificateID` in every notification.
public struct RichNotifications: Sendable, Equatable {
    /// The properties a `blind` notification carries, in Graph's names.
    public static let blindProperties = ["subject", "from", "receivedDateTime", "importance", "hasAttachments"]

    public let selected: [String]
    public let certificate: [UInt8]
    public let certificateID: String

    public init(selected: [String], certificate: [UInt8], certificateID: String) {
        precondition(!selected.isEmpty, "Graph refuses a rich subscription without $select")
        self.selected = selected
        self.certificate = certificate
        self.certificateID = certificateID
    }
}

/// Graph and token-endpoint calls over one reused libcurl handle (kept-alive
/// connections). One thread at a time, like the `HTTPClient` it owns; application
/// tokens come from the process-wide `GraphAppTokens`.
public final class GraphClient {
    public static let scope = "https://graph.microsoft.com/.default"
    private let http: HTTPClient
    public let configuration: GraphClientConfiguration
    private let tokens: GraphAppTokens
    private let clock: @Sendable () -> Int64

    public init(configuration: GraphClientConfiguration, tokens: GraphAppTokens,
                clock: @escaping @Sendable () -> Int64 = { WallClock.milliseconds() }) throws(CurlError) {
        self.configuration = configuration
        self.tokens = tokens
        self.clock = clock
        http = try HTTPClient(configuration: HTTPClientConfiguration(
            caBundlePath: configuration.caBundlePath, connectTimeout: .seconds(3), totalTimeout: configuration.timeout,
            preferHTTP2: true, maximumResponseBytes: 1 << 20
        ))
    }

    // MARK: Application tokens

    /// The tenant's application token: the cached one, or a new one for a fresh client
    /// assertion (client-credentials grant).
    public func applicationToken(_ application: GraphApplication, deadline: Deadline? = nil) throws(GraphError) -> String {
        let now = clock()
        if let token = tokens.cached(tenantID: application.tenantID, nowMilliseconds: now) { return token }
        let endpoint = "\(configuration.loginURL)/\(application.tenantID)/oauth2/v2.0/token"
        let assertion: String
        do {
            assertion = try application.assertion(audience: endpoint, now: now / 1000)
        } catch {
            throw .malformed("could not sign a client assertion: \(error.operation)")
        }
        let form = PercentEncoding.form([
            ("client_id", application.clientID), ("scope", Self.scope),
            ("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
            ("client_assertion", assertion), ("grant_type", "client_credentials"),
        ])
        let response = try transfer(HTTPRequest(method: .post, url: endpoint,
                                                headers: [("Content-Type", "application/x-www-form-urlencoded")], body: form),
                                    deadline: deadline)
        let body = try? JSONParser.parse(response.body)
        guard response.status == 200 else {
            // Entra's error and the AADSTS number say what is wrong; its description can
            // quote the request, so it stays out of the log.
            let error = body?["error"]?.stringValue ?? "HTTP \(response.status)"
            let number = body?["error_codes"].flatMap { value -> String? in
                if case .array(let codes) = value { return codes.first?.scalarText }
                return nil
            }
            throw .tokenRefused(number.map { "\(error) (AADSTS\($0))" } ?? error)
        }
        guard let token = body?["access_token"]?.stringValue, !token.isEmpty, token.utf8.count <= 16 * 1024,
              let lifetime = body?["expires_in"]?.scalarText.flatMap(Int64.init), lifetime > 0 else {
            throw .malformed("the token endpoint's answer has no access_token and expires_in")
        }
        tokens.store(tenantID: application.tenantID, token: token, expiresAt: now + lifetime * 1000)
        return token
    }

    // MARK: Delegated: who the device's user is

    /// The signed-in user of a delegated token (`GET /me`), read once at registration.
    public func signedInUser(delegatedToken: String, deadline: Deadline? = nil) throws(GraphError) -> GraphUser {
        let body = try call(.get, "/v1.0/me?$select=id,mail,userPrincipalName", bearer: delegatedToken, deadline: deadline)
        guard let id = body["id"]?.stringValue, Self.isOpaqueID(id) else { throw .malformed("/me has no id") }
        return GraphUser(id: id, addresses: [body["mail"]?.stringValue, body["userPrincipalName"]?.stringValue].compactMap { $0 })
    }

    // MARK: Subscriptions (application token)

    public func createSubscription(_ request: SubscriptionRequest, application: GraphApplication,
                                   deadline: Deadline? = nil) throws(GraphError) -> GraphSubscription {
        var body = JSONObjectWriter()
        body.add("changeType", "created")
        body.add("notificationUrl", request.notificationURL)
        body.add("lifecycleNotificationUrl", request.notificationURL)
        body.add("resource", request.resource)
        body.add("expirationDateTime", request.expiresAt.isoString)
        body.add("clientState", request.clientState)
        body.add("latestSupportedTlsVersion", "v1_2")
        if let encryption = request.encryption {
            body.add("includeResourceData", rawJSON: Array("true".utf8))
            body.add("encryptionCertificate", Base64.encode(encryption.certificate))
            body.add("encryptionCertificateId", encryption.certificateID)
        }
        // Message ids that survive moves between folders; only settable at creation.
        return try subscription(call(.post, "/v1.0/subscriptions", application: application, body: body.finished(),
                                     headers: [("Prefer", "IdType=\"ImmutableId\"")], deadline: deadline))
    }

    /// Extends a subscription (which also reauthorizes it).
    public func renewSubscription(id: String, until expiresAt: Timestamp, application: GraphApplication,
                                  deadline: Deadline? = nil) throws(GraphError) -> GraphSubscription {
        var body = JSONObjectWriter()
        body.add("expirationDateTime", expiresAt.isoString)
        return try subscription(call(.patch, "/v1.0/subscriptions/\(PercentEncoding.escape(id))",
                                     application: application, body: body.finished(), deadline: deadline))
    }

    /// Points a rich subscription at another certificate (a device's key rotation),
    /// renewing it at the same time.
    public func rotateCertificate(id: String, to encryption: RichNotifications, until expiresAt: Timestamp, application: GraphApplication,
                                  deadline: Deadline? = nil) throws(GraphError) -> GraphSubscription {
        var body = JSONObjectWriter()
        body.add("expirationDateTime", expiresAt.isoString)
        body.add("encryptionCertificate", Base64.encode(encryption.certificate))
        body.add("encryptionCertificateId", encryption.certificateID)
        return try subscription(call(.patch, "/v1.0/subscriptions/\(PercentEncoding.escape(id))",
                                     application: application, body: body.finished(), deadline: deadline))
    }

    public func deleteSubscription(id: String, application: GraphApplication, deadline: Deadline? = nil) throws(GraphError) {
        _ = try call(.delete, "/v1.0/subscriptions/\(PercentEncoding.escape(id))", application: application, deadline: deadline)
    }

    /// The application's subscriptions in the tenant (at most 10 pages).
    public func subscriptions(application: GraphApplication, deadline: Deadline? = nil) throws(GraphError) -> [GraphSubscription] {
        var found: [GraphSubscription] = []
        var path = "/v1.0/subscriptions"
        for _ in 0..<10 {
            let page = try call(.get, path, application: application, deadline: deadline)
            guard case .array(let values)? = page["value"] else { throw .malformed("a subscription list without value") }
            for value in values {
                if let subscription = try? subscription(value) { found.append(subscription) }
            }
            guard let next = page["@odata.nextLink"]?.stringValue, next.hasPrefix(configuration.graphURL + "/") else { break }
            path = String(next.dropFirst(configuration.graphURL.count))
        }
        return found
    }

    // MARK: The identity platform's signing keys

    /// The RSA keys the Microsoft identity platform signs tokens with: its OpenID
    /// configuration (`<login>/common/.well-known/openid-configuration`), then the
    /// JWKS it names, which must be under the same base URL. Keys that are not RSA
    /// signing keys are skipped. At most 1 MiB each, within the client's timeouts.
    public func identityPlatformKeys(deadline: Deadline? = nil) throws(GraphError) -> [IdentityPlatformKey] {
        let configuration = try fetchJSON(self.configuration.loginURL + "/common/.well-known/openid-configuration", deadline: deadline)
        // Only from the identity platform ENS is configured with (graph.login_url): a
        // configuration document is no reason to fetch keys anywhere else.
        guard let jwksURL = configuration["jwks_uri"]?.stringValue,
              jwksURL.hasPrefix(self.configuration.loginURL + "/"), jwksURL.utf8.count <= 2048 else {
            throw .malformed("the OpenID configuration's jwks_uri is not under graph.login_url")
        }
        guard case .array(let keys)? = try fetchJSON(jwksURL, deadline: deadline)["keys"] else { throw .malformed("a JWKS without keys") }
        return keys.prefix(100).compactMap(IdentityPlatformKey.init(jwk:))
    }

    private func fetchJSON(_ url: String, deadline: Deadline?) throws(GraphError) -> JSONValue {
        let response = try transfer(HTTPRequest(method: .get, url: url, headers: [("Accept", "application/json")]), deadline: deadline)
        guard response.status == 200 else { throw .status(response.status, code: "") }
        guard let parsed = try? JSONParser.parse(response.body), case .object = parsed else { throw .malformed("not a JSON object") }
        return parsed
    }

    // MARK: Mail (application token)

    /// Sender and subject of one message, nothing more (`$select`).
    public func summary(userPath: String, messageID: String, application: GraphApplication,
                        deadline: Deadline? = nil) throws(GraphError) -> MailSummary {
        let message = try call(.get, "/v1.0/\(userPath)/messages/\(PercentEncoding.escape(messageID))?$select=subject,from",
                               application: application, deadline: deadline)
        let sender = message["from"]?["emailAddress"]
        let name = sender?["name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } ?? sender?["address"]?.stringValue ?? ""
        return MailSummary(itemID: messageID, subject: message["subject"]?.stringValue ?? "", senderName: name)
    }

    /// The Inbox's unread count.
    public func inboxUnreadCount(userPath: String, application: GraphApplication, deadline: Deadline? = nil) throws(GraphError) -> Int {
        let folder = try call(.get, "/v1.0/\(userPath)/mailFolders/inbox?$select=unreadItemCount", application: application, deadline: deadline)
        guard let count = folder["unreadItemCount"]?.scalarText.flatMap(Int.init), count >= 0 else {
            throw .malformed("a folder without unreadItemCount")
        }
        return count
    }

    // MARK: Plumbing

    private enum Method { case get, post, patch, delete }

    /// A call with the application's token; a 401 forgets the token and tries once more
    /// with a fresh one (consent may have changed, or the token been revoked).
    private func call(_ method: Method, _ path: String, application: GraphApplication, body: [UInt8]? = nil,
                      headers: [(String, String)] = [], deadline: Deadline?) throws(GraphError) -> JSONValue {
        do {
            return try call(method, path, bearer: applicationToken(application, deadline: deadline), body: body, headers: headers, deadline: deadline)
        } catch .unauthorized(status: 401, _) {
            tokens.forget(tenantID: application.tenantID)
            return try call(method, path, bearer: applicationToken(application, deadline: deadline), body: body, headers: headers, deadline: deadline)
        }
    }

    private func call(_ method: Method, _ path: String, bearer: String, body: [UInt8]? = nil,
                      headers: [(String, String)] = [], deadline: Deadline?) throws(GraphError) -> JSONValue {
        var allHeaders = [("Authorization", "Bearer " + bearer), ("Accept", "application/json")] + headers
        if body != nil { allHeaders.append(("Content-Type", "application/json")) }
        let request: HTTPRequest
        switch method {
        case .get: request = HTTPRequest(method: .get, url: configuration.graphURL + path, headers: allHeaders)
        case .post: request = HTTPRequest(method: .post, url: configuration.graphURL + path, headers: allHeaders, body: body ?? [])
        case .patch: request = HTTPRequest(method: .patch, url: configuration.graphURL + path, headers: allHeaders, body: body ?? [])
        case .delete: request = HTTPRequest(method: .delete, url: configuration.graphURL + path, headers: allHeaders)
        }
        let response = try transfer(request, deadline: deadline)
        let parsed = try? JSONParser.parse(response.body)
        let code = parsed?["error"]?["code"]?.stringValue ?? ""
        switch response.status {
        case 200...299:
            if response.status == 204 || response.body.isEmpty { return .object([:]) }
            guard let parsed, case .object = parsed else { throw .malformed("HTTP \(response.status) without a JSON object") }
            return parsed
        case 401, 403: throw .unauthorized(status: response.status, code: code)
        case 404: throw .notFound(code: code)
        case 409: throw .conflict
        case 429, 503:
            // Graph sends seconds; without a readable header, 5 s. At least 1 s, at most an hour.
            let asked = RetryAfter.parse(response.header("retry-after"), now: .now(), maximum: .seconds(3600)) ?? .seconds(5)
            throw .throttled(retryAfter: max(asked, .seconds(1)))
        default: throw .status(response.status, code: code)
        }
    }

    private func transfer(_ request: HTTPRequest, deadline: Deadline?) throws(GraphError) -> HTTPResponse {
        do {
            return try http.send(request, deadline: deadline)
        } catch {
            throw .transport(error.description)
        }
    }

    private func subscription(_ value: JSONValue) throws(GraphError) -> GraphSubscription {
        guard let id = value["id"]?.stringValue, Self.isOpaqueID(id), let resource = value["resource"]?.stringValue,
              let expiry = value["expirationDateTime"]?.stringValue.flatMap(Timestamp.init(isoString:)) else {
            throw .malformed("a subscription without id, resource or expirationDateTime")
        }
        return GraphSubscription(id: id, resource: resource, expiresAt: expiry, clientState: value["clientState"]?.stringValue)
    }

    /// Graph's ids for users and subscriptions: GUIDs in practice; anything printable
    /// without path or query characters, up to 128 characters, is taken.
    static func isOpaqueID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 128
            && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != 0x2F && $0 != 0x3F && $0 != 0x23 && $0 != 0x25 }
    }
}
