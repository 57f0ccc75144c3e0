public import ENSModel

/// The `responseCode` values of the API contract.
public enum ResponseCode: String, Sendable {
    // Business outcomes (HTTP 200)
    case alive = "Alive"
    case userSubscriptionNotFound = "UserSubscriptionNotFound"
    case userRecordPresentNotSubscribed = "UserRecordPresentNotSubscribed"
    case userAlreadySubscribed = "UserAlreadySubscribed"
    case userUpdated = "UserUpdated"
    case userSubscribed = "UserSubscribed"
    case deviceUnregistered = "DeviceUnregistered"
    case updateSuccess = "UpdateSuccess"
    case updateFail = "UpdateFail"
    case autodiscoverFailed = "AutodiscoverFailed"
    case exchangeAuthFailed = "ExchangeAuthFailed"
    case exchangeError = "ExchangeError"
    case notificationFound = "NotificationFound"
    case notificationNotFound = "NotificationNotFound"
    case notificationHistory = "NotificationHistory"
    // Errors
    case invalidRequest = "InvalidRequest"
    case unauthorized = "Unauthorized"
    case forbidden = "Forbidden"
    case notFound = "NotFound"
    case methodNotAllowed = "MethodNotAllowed"
    case payloadTooLarge = "PayloadTooLarge"
    case unsupportedMediaType = "UnsupportedMediaType"
    case tooManyRequests = "TooManyRequests"
    case serviceUnavailable = "ServiceUnavailable"
    case internalError = "InternalError"
    /// A push hook's routing token names nothing ENS still serves (Dovecot's opt-in
    /// outlived its registration): the server's script clears it.
    case gone = "Gone"
}

/// An answer to a device: HTTP status and a flat JSON object with `responseCode`.
public struct APIResponse: Sendable {
    public var status: Int
    public var body: [UInt8]
    public var extraHeaders: [(String, String)] = []
    public var contentType = "application/json; charset=utf-8"

    public init(status: Int, body: [UInt8], contentType: String = "application/json; charset=utf-8") {
        self.status = status
        self.body = body
        self.contentType = contentType
    }

    /// A 200 answer with `responseCode` and further string fields, in the given order.
    public static func ok(_ code: ResponseCode, _ fields: [(String, String)] = []) -> APIResponse {
        var writer = JSONObjectWriter()
        for (key, value) in fields { writer.add(key, value) }
        writer.add("responseCode", code.rawValue)
        return APIResponse(status: 200, body: writer.finished())
    }

    /// A 200 answer whose fields are not all strings (a number, an object, a list):
    /// `fields` writes them, then `responseCode` is added.
    public static func json(_ code: ResponseCode, _ fields: (inout JSONObjectWriter) -> Void) -> APIResponse {
        var writer = JSONObjectWriter()
        fields(&writer)
        writer.add("responseCode", code.rawValue)
        return APIResponse(status: 200, body: writer.finished())
    }

    /// An error answer: status, `responseCode` and a short human `message`; `refusal`, a
    /// machine-readable code where a client must tell refusals apart (the blind mode's
    /// certificate problems: docs/api.md), never for the uniform 400.
    public static func error(_ status: Int, _ code: ResponseCode, _ message: String, refusal: String? = nil) -> APIResponse {
        var writer = JSONObjectWriter()
        writer.add("responseCode", code.rawValue)
        writer.add("message", message)
        if let refusal { writer.add("refusal", refusal) }
        return APIResponse(status: status, body: writer.finished())
    }

    /// The CGI response bytes: `Status:` line, headers, blank line, body (HEAD: no body).
    public func cgiBytes(includeBody: Bool) -> [UInt8] {
        var head = "Status: \(status) \(Self.reason(status))\r\nContent-Type: \(contentType)\r\n" +
                   "Content-Length: \(body.count)\r\nCache-Control: no-store\r\n"
        for (name, value) in extraHeaders { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        var bytes = Array(head.utf8)
        if includeBody { bytes.append(contentsOf: body) }
        return bytes
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 202: "Accepted"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 410: "Gone"
        case 413: "Payload Too Large"
        case 415: "Unsupported Media Type"
        case 429: "Too Many Requests"
        case 503: "Service Unavailable"
        default: "Internal Server Error"
        }
    }
}

/// A failure that ends a request with one of the contract's error answers.
public struct APIError: Error, Sendable, CustomStringConvertible {
    public let response: APIResponse
    /// A log-safe reason (never contains request data).
    public let reason: String

    public init(_ status: Int, _ code: ResponseCode, _ message: String, reason: String? = nil, refusal: String? = nil) {
        response = .error(status, code, message, refusal: refusal)
        self.reason = reason ?? message
    }

    public var description: String { reason }

    /// The contract's one 400 answer. Every cause — a missing or ill-typed parameter, a
    /// userid/email mismatch, and every failure of a sealed parameter (bad base64,
    /// length, key, padding, UTF-8, JSON, missing field) — gets these same bytes, so the
    /// answer never says which step failed (no padding oracle). The cause is kept as a
    /// log-safe `reason` for the server's own debug log.
    public static func invalidRequest(_ reason: String) -> APIError {
        APIError(400, .invalidRequest, "The request is invalid.", reason: reason)
    }

    public static let sealedParameterRejected = invalidRequest("sealed parameter rejected")

    public static let unauthorized = APIError(401, .unauthorized, "A valid ApiToken header is required.")
    public static let notFound = APIError(404, .notFound, "No such endpoint.")
    public static let serviceUnavailable = APIError(503, .serviceUnavailable, "The service is temporarily unavailable; retry later.")
    public static let internalError = APIError(500, .internalError, "The server could not complete the request.")

    public static func methodNotAllowed(_ allowed: [String]) -> APIError {
        let methods = allowed.contains("GET") ? allowed + ["HEAD"] : allowed
        let error = APIError(405, .methodNotAllowed, "Use \(methods.joined(separator: " or ")) for this endpoint.")
        return APIError(copying: error, header: ("Allow", methods.joined(separator: ", ")))
    }

    /// Same text as nginx's own 413 (nginx/ens-locations.conf), whichever refuses first.
    public static func payloadTooLarge(limit: Int) -> APIError {
        APIError(413, .payloadTooLarge, "The request body is too large.", reason: "body over \(limit) bytes")
    }

    public static let unsupportedMediaType = APIError(415, .unsupportedMediaType, "Send application/json or application/x-www-form-urlencoded.")
    public static let unsupportedXMLMediaType = APIError(415, .unsupportedMediaType, "Send text/xml.")

    /// The same failure with one more response header (`Retry-After`, say).
    public func adding(header: (String, String)) -> APIError { APIError(copying: self, header: header) }

    private init(copying other: APIError, header: (String, String)) {
        var response = other.response
        response.extraHeaders.append(header)
        self.response = response
        self.reason = other.reason
    }
}
