public import Curl
public import ENSModel
public import SenderWire
internal import Codecs
internal import OpenSSL
public import POSIX

/// A Firebase service account, from the JSON key file Google issues for it: the
/// project FCM sends for, the key that signs the OAuth assertion, and where to
/// exchange it. Only the fields ENS uses are read; the private key never leaves here.
public struct FCMServiceAccount: Sendable {
    public let projectID: String
    public let clientEmail: String
    public let privateKeyID: String
    public let tokenURI: String
    let key: RSASigningKey

    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let problem: String
        public var description: String { problem }
    }

    /// Reads a service-account key file's JSON. Errors name the field at fault, never
    /// its value.
    public init(json bytes: [UInt8]) throws(Invalid) {
        guard case .object(let members)? = try? JSONParser.parse(bytes) else { throw Invalid(problem: "not a JSON object") }
        func field(_ name: String) throws(Invalid) -> String {
            guard let value = members[name]?.stringValue, !value.isEmpty else { throw Invalid(problem: "'\(name)' is missing") }
            return value
        }
        guard try field("type") == "service_account" else { throw Invalid(problem: "'type' is not service_account") }
        projectID = try field("project_id")
        guard projectID.utf8.count <= 64, projectID.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }) else {
            throw Invalid(problem: "'project_id' is not a Google Cloud project id")
        }
        clientEmail = try field("client_email")
        privateKeyID = try field("private_key_id")
        tokenURI = try field("token_uri")
        guard tokenURI.hasPrefix("https://") else { throw Invalid(problem: "'token_uri' is not an https URL") }
        do {
            key = try RSASigningKey(pem: try field("private_key"))
        } catch {
            throw Invalid(problem: "'private_key' is not an RSA private key of 2048 bits or more")
        }
    }

    /// The OAuth 2.0 JWT-bearer assertion (RFC 7523) Google's token endpoint takes for
    /// an access token to FCM: RS256, `kid` the key's id, audience the token URI, valid
    /// for one hour from `now` (seconds since the epoch).
    func assertion(now: Int64) throws(OpenSSLError) -> String {
        var header = JSONObjectWriter()
        header.add("alg", "RS256")
        header.add("typ", "JWT")
        header.add("kid", privateKeyID)
        var claims = JSONObjectWriter()
        claims.add("iss", clientEmail)
        claims.add("scope", FCMProvider.scope)
        claims.add("aud", tokenURI)
        claims.add("iat", Int(now))
        claims.add("exp", Int(now + 3600))
        let signingInput = Base64.encodeURLSafe(header.finished()) + "." + Base64.encodeURLSafe(claims.finished())
        return signingInput + "." + Base64.encodeURLSafe(try key.signRS256(Array(signingInput.utf8)))
    }
}

/// Firebase Cloud Messaging's HTTP v1 API: the second `PushProvider`. A message is
/// `POST /v1/projects/<project>/messages:send` with a bearer OAuth access token of the
/// service account configured for the app's package name (the notification's topic).
/// Access tokens come from the account's `token_uri` in exchange for a signed
/// assertion; each is reused for every message until five minutes before it expires,
/// and renewed early when FCM answers 401.
///
/// ENS's canonical payload (APNs's shape) is translated: an alert becomes a
/// high-priority message with `notification.title`/`body`, a background push a
/// normal-priority data-only message, an alert the app shows itself (`encrypted` and
/// `secure` privacy) a high-priority data-only message; the badge, sound, user id,
/// action, sync key and `ens` members (id, ts, privacy, enc; `blind` as its JSON text) travel as string data.
/// The collapse key is the notification id (a replay replaces its first delivery), the TTL what is left of the
/// notification's expiry.
public final class FCMProvider: PushProvider {
    public let kind = DeviceToken.Provider.fcm
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// An access token is renewed this long before Google says it expires.
    static let renewalMargin: Int64 = 300_000

    private let accounts: [String: FCMServiceAccount]
    private let url: String
    private let tokenClient: HTTPClient
    private let clock: @Sendable () -> Int64
    /// Access tokens by client email: the token and when it expires (ms since epoch).
    private var accessTokens: [String: (token: String, expiresAt: Int64)] = [:]
    /// When an exchange last failed per account, so a dead token endpoint is asked at
    /// most once per `exchangeBackoff` instead of once per message.
    private var lastFailure: [String: Int64] = [:]
    static let exchangeBackoff: Int64 = 5_000

    /// - Parameters:
    ///   - accounts: the service account per Android package name.
    ///   - url: FCM's base URL (https://fcm.googleapis.com; tests: the simulator).
    ///   - caBundlePath: CA bundle for the token endpoint (nil: the system store).
    ///   - clock: wall-clock milliseconds (tests move it).
    public init(accounts: [String: FCMServiceAccount], url: String, caBundlePath: String?,
                clock: @escaping @Sendable () -> Int64 = { WallClock.milliseconds() }) throws(CurlError) {
        self.accounts = accounts
        self.url = url
        self.clock = clock
        tokenClient = try HTTPClient(configuration: HTTPClientConfiguration(
            caBundlePath: caBundlePath, connectTimeout: .seconds(3), totalTimeout: .seconds(10), preferHTTP2: true,
            maximumResponseBytes: 64 * 1024
        ))
    }

    public func baseURL(for environment: PushNotification.Environment) -> String { url }

    /// Every account's requests carry their own bearer token: they share connections.
    public var credentialCount: Int { accounts.isEmpty ? 0 : 1 }

    public func request(for notification: PushNotification) throws(PushRequestError) -> PushRequest {
        guard let account = accounts[notification.topic] else { throw .noCredentials(topic: notification.topic) }
        let token = try accessToken(for: account)
        let body = try Self.message(for: notification, nowMilliseconds: clock())
        return PushRequest(url: url + "/v1/projects/\(account.projectID)/messages:send",
                           headers: [("authorization", "Bearer " + token), ("content-type", "application/json")], body: body)
    }

    public func verdict(for answer: PushAnswer) -> PushVerdict {
        var code: String?
        var message = ""
        if answer.status != nil, case .object(let members)? = try? JSONParser.parse(answer.body), case .object(let error)? = members["error"] {
            message = error["message"]?.stringValue ?? ""
            if case .array(let details)? = error["details"] {
                code = details.lazy.compactMap { detail -> String? in
                    guard detail["@type"]?.stringValue == "type.googleapis.com/google.firebase.fcm.v1.FcmError" else { return nil }
                    return detail["errorCode"]?.stringValue
                }.first
            }
            code = code ?? error["status"]?.stringValue
        }
        let action = Self.action(status: answer.status, errorCode: code, message: message)
        return PushVerdict(action: action, reason: Self.reasonLabel(code), retryAfter: answer.retryAfter)
    }

    /// FCM said 401: the next request exchanges a new assertion whatever the cached
    /// token's expiry says.
    public func refreshCredentials() throws {
        accessTokens.removeAll()
        lastFailure.removeAll()
    }

    /// What to do with an FCM answer, as a pure function of Google's error table.
    public static func action(status: Int?, errorCode: String?, message: String) -> DeliveryAction {
        guard let status else { return .retry }
        switch (status, errorCode ?? "") {
        case (200, _): return .delivered
        case (_, "UNREGISTERED"): return .disableToken(timestamp: nil)
        case (_, "SENDER_ID_MISMATCH"): return .disableToken(timestamp: nil)
        case (400, "INVALID_ARGUMENT") where message.lowercased().contains("registration token"):
            // The token itself is malformed or not a registration token: never retry.
            return .disableToken(timestamp: nil)
        case (401, _): return .refreshCredentialsAndRetry
        case (403, _):  // PERMISSION_DENIED and the like (SENDER_ID_MISMATCH is the token's, above)
            // The service account may not send for this project: an operator must fix it.
            return .credentialRefused(reason: "\(status) \(errorCode ?? "")")
        case (429, _), (500, _), (503, _): return .retry
        default: return .drop(reason: "\(status) \(errorCode ?? "")")
        }
    }

    /// Google's error codes are a short fixed vocabulary of capitals and underscores;
    /// anything else is folded into "other" so a metric label cannot grow without bound.
    static func reasonLabel(_ code: String?) -> String {
        guard let code, !code.isEmpty else { return "" }
        guard code.utf8.count <= 40, code.utf8.allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A) || $0 == 0x5F }) else { return "other" }
        return code
    }

    // MARK: Access tokens

    /// The account's cached access token, or a new one when none is cached or it is
    /// within `renewalMargin` of expiring. A failed exchange is retried with the
    /// notification (not dropped), at most once per `exchangeBackoff` per account.
    private func accessToken(for account: FCMServiceAccount) throws(PushRequestError) -> String {
        let now = clock()
        if let cached = accessTokens[account.clientEmail], cached.expiresAt - Self.renewalMargin > now { return cached.token }
        if let failed = lastFailure[account.clientEmail], now - failed < Self.exchangeBackoff {
            throw .temporarilyUnavailable("the FCM token endpoint failed moments ago")
        }
        do {
            let (token, lifetime) = try exchange(account, now: now)
            accessTokens[account.clientEmail] = (token, now + lifetime * 1000)
            lastFailure[account.clientEmail] = nil
            return token
        } catch {
            lastFailure[account.clientEmail] = now
            throw error
        }
    }

    /// One JWT-bearer exchange at the account's token URI.
    private func exchange(_ account: FCMServiceAccount, now: Int64) throws(PushRequestError) -> (token: String, lifetimeSeconds: Int64) {
        let assertion: String
        do {
            assertion = try account.assertion(now: now / 1000)
        } catch {
            throw .credentials("cannot sign the FCM token request: \(error.operation)")
        }
        let form = "grant_type=" + PercentEncoding.escape("urn:ietf:params:oauth:grant-type:jwt-bearer")
            + "&assertion=" + PercentEncoding.escape(assertion)
        let response: HTTPResponse
        do {
            response = try tokenClient.send(HTTPRequest(method: .post, url: account.tokenURI,
                                                        headers: [("Content-Type", "application/x-www-form-urlencoded")], body: Array(form.utf8)))
        } catch {
            throw .temporarilyUnavailable("FCM token endpoint unreachable: \(error)")
        }
        guard response.status == 200 else {
            // 4xx: the account or its key is refused (revoked, a wrong clock); 5xx:
            // Google's trouble. OAuth's error code is a short word; nothing else is kept.
            // A body that is not OAuth's JSON (a proxy's page, nothing) is a real answer
            // of a peer's, not an impossible state: it is named "other".
            let code = (try? JSONParser.parse(response.body))?["error"]?.stringValue ?? ""
            let word = !code.isEmpty && code.utf8.count <= 40 && code.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F }) ? code : "other"
            throw .temporarilyUnavailable("FCM token endpoint answered \(response.status) \(word)")
        }
        guard case .object(let members)? = try? JSONParser.parse(response.body),
              let token = members["access_token"]?.stringValue, !token.isEmpty, token.utf8.count <= 4096,
              token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .temporarilyUnavailable("FCM token endpoint gave no usable access_token")
        }
        var lifetime: Int64 = 3600
        if case .number(let text)? = members["expires_in"], let seconds = Int64(text), seconds > 0 { lifetime = min(seconds, 86_400) }
        return (token, lifetime)
    }

    // MARK: Messages

    /// The `messages:send` body for a notification whose payload is in ENS's canonical
    /// (APNs) shape.
    static func message(for notification: PushNotification, nowMilliseconds: Int64) throws(PushRequestError) -> [UInt8] {
        guard case .object(let payload)? = try? JSONParser.parse(notification.payload), case .object(let aps)? = payload["aps"] else {
            throw .credentials("the notification's payload is not in ENS's form")
        }
        var data: [(String, String)] = [("notificationId", notification.id)]
        if case .object(let ens)? = payload["ens"] {
            for key in ens.keys.sorted() {
                guard let member = ens[key] else { continue }
                if let text = member.scalarText {
                    data.append((key, text))
                } else if case .object = member {
                    // `ens.blind`: FCM's data values are strings, so the object travels as its JSON.
                    data.append((key, String(decoding: member.encoded, as: UTF8.self)))
                }
            }
        }
        if let badge = aps["badge"]?.scalarText { data.append(("badge", badge)) }
        if let sound = aps["sound"]?.stringValue { data.append(("sound", sound)) }
        for key in payload.keys.sorted() where key != "aps" && key != "ens" {
            if let text = payload[key]?.scalarText { data.append((key, text)) }
        }

        var title: String?
        var body: String?
        switch aps["alert"] {
        case .object(let alert)?:
            title = alert["title"]?.stringValue
            body = alert["body"]?.stringValue
        case .string(let text)?:
            body = text
        default:
            break
        }
        let isAlert = notification.pushType == .alert && (title != nil || body != nil)
        // `encrypted` and `secure` alerts (docs/privacy.md) are shown by the app once it
        // has decrypted or fetched the content: a high-priority data-only message, so
        // Android wakes the app instead of showing a generic notification itself.
        let appShowsIt = isAlert && aps["mutable-content"]?.scalarText == "1"

        var android = JSONObjectWriter()
        android.add("priority", isAlert ? "HIGH" : "NORMAL")
        android.add("ttl", "\(max(0, notification.expiration - nowMilliseconds / 1000))s")
        android.add("collapse_key", notification.id)
        var dataObject = JSONObjectWriter()
        for (key, value) in data { dataObject.add(key, value) }
        var message = JSONObjectWriter()
        message.add("token", notification.deviceToken.value)
        message.add("android", rawJSON: android.finished())
        if isAlert && !appShowsIt {
            var shown = JSONObjectWriter()
            if let title { shown.add("title", title) }
            if let body { shown.add("body", body) }
            message.add("notification", rawJSON: shown.finished())
        }
        message.add("data", rawJSON: dataObject.finished())
        var request = JSONObjectWriter()
        request.add("message", rawJSON: message.finished())
        return request.finished()
    }
}
