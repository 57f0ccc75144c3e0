/// Everything an ``ENSClient`` call can fail with: a ``Code`` per documented response
/// code of ENS (docs/api.md, "Errors", and the business outcomes that are failures for
/// the call that got them), plus what happens on this side (transport, sealing, key
/// store), with what is known beside it.
///
/// A struct, not an enum, so a code ENS adds later is a new ``Code`` constant, not a
/// case that breaks every `switch` in an app (as AsyncHTTPClient's `HTTPClientError`).
/// Act on ``code``, never on ``message``: ENS's words are for people and may change.
///
/// ```swift
/// do { try await client.checkIn(userID: id) }
/// catch where error.code == .tooManyRequests { retry(after: error.retryAfter) }
/// ```
public struct ENSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, to act on. Compare with the constants; new ones may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// `case .unauthorized:` in a `switch` over an ``ENSError``, whatever else it holds.
        public static func ~= (pattern: Code, value: ENSError) -> Bool { pattern == value.code }

        /// `case ENSError.Code.unauthorized:` in a `switch` over any error.
        public static func ~= (pattern: Code, value: any Error) -> Bool { (value as? ENSError)?.code == pattern }

        /// 400 `InvalidRequest`. ENS answers every cause with the same bytes, a sealed
        /// parameter's failure included, so nothing more can be said; ENSKit checks what
        /// it can before sending. A retry with the same input fails the same way.
        public static let invalidRequest = Code("invalidRequest")
        /// 401 `Unauthorized`: the `ApiToken` is missing, unknown or revoked.
        public static let unauthorized = Code("unauthorized")
        /// 404 `NotFound`: no such endpoint at the configured base URL.
        public static let notFound = Code("notFound")
        /// 405 `MethodNotAllowed`.
        public static let methodNotAllowed = Code("methodNotAllowed")
        /// 413 `PayloadTooLarge`: the body is over 64 KiB.
        public static let payloadTooLarge = Code("payloadTooLarge")
        /// 415 `UnsupportedMediaType`.
        public static let unsupportedMediaType = Code("unsupportedMediaType")
        /// 429 `TooManyRequests`, after the retries the configuration allows;
        /// ``ENSError/retryAfter`` when ENS sent `Retry-After`.
        public static let tooManyRequests = Code("tooManyRequests")
        /// 500 `InternalError`.
        public static let internalError = Code("internalError")
        /// 503 `ServiceUnavailable`, after the retries the configuration allows: nothing
        /// of the request was applied. ``ENSError/retryAfter`` when ENS sent one.
        public static let serviceUnavailable = Code("serviceUnavailable")
        /// `UserSubscriptionNotFound` where it is a failure: ENS has no record for the
        /// user, or (for the device's own operations) does not know this device or its
        /// secret. The app registers again.
        public static let userNotFound = Code("userNotFound")
        /// `UpdateFail`: the device is not registered (or its secret is not its own), the
        /// old token is unknown, or a sync key was refused.
        public static let updateFailed = Code("updateFailed")
        /// `AutodiscoverFailed`: ENS found no mail server for the address.
        public static let autodiscoverFailed = Code("autodiscoverFailed")
        /// `ExchangeAuthFailed`: the mail server refused the credentials, or they open
        /// another mailbox.
        public static let exchangeAuthFailed = Code("exchangeAuthFailed")
        /// `ExchangeError`: the mailbox could not be subscribed.
        public static let exchangeError = Code("exchangeError")
        /// An answer ENS never sends to this call: an unknown `responseCode`, a status
        /// that does not go with it, a body that is not ENS's JSON, a missing or
        /// malformed field. ENSKit refuses it rather than guess.
        public static let unexpectedAnswer = Code("unexpectedAnswer")
        /// 400 about the blind mode, the only 400s ENS words (the certificate is public
        /// and never sealed): ``ENSError/blindRefusal`` says what is wrong.
        public static let blindRefused = Code("blindRefused")
        /// The request did not get an HTTP response (``ENSError/underlying`` says why).
        public static let transport = Code("transport")
        /// A value ENSKit was asked to send cannot be sent (a token of the wrong form, a
        /// plaintext too long for its sealed parameter, a sync key over 512 bytes ...).
        public static let invalidArgument = Code("invalidArgument")
        /// The user's public key from ENS is not an RSA key of 2048 bits or more.
        public static let unusablePublicKey = Code("unusablePublicKey")
        /// The device has no `deviceSecret` for this user: it registered without ENSKit,
        /// or its key store was wiped. Register again (ENSKit then makes and sends one).
        public static let noDeviceSecret = Code("noDeviceSecret")
        /// The key store failed (``ENSError/underlying`` is its ``ENSKeyStoreError``).
        public static let keyStore = Code("keyStore")
    }

    public let code: Code
    /// ENS's words (for people), or what ENSKit found wrong; nil when there are none.
    public let message: String?
    /// How long ENS asked to wait (`Retry-After`), for 429 and 503.
    public let retryAfter: Duration?
    /// The HTTP status, when ENS answered.
    public let status: Int?
    /// ENS's `responseCode`, when it sent one.
    public let responseCode: String?
    /// For ``Code/blindRefused``: the reason ENS named.
    public let blindRefusal: ENSBlindRefusal?
    /// What failed underneath: an ``ENSTransportError`` or an ``ENSKeyStoreError``.
    public let underlying: (any Error & Sendable)?

    public init(code: Code, message: String? = nil, retryAfter: Duration? = nil, status: Int? = nil, responseCode: String? = nil,
                blindRefusal: ENSBlindRefusal? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
        self.status = status
        self.responseCode = responseCode
        self.blindRefusal = blindRefusal
        self.underlying = underlying
    }

    public var description: String {
        var parts = ["ENSError.\(code)"]
        if let status { parts.append("status \(status)") }
        if let responseCode { parts.append(responseCode) }
        if let blindRefusal { parts.append("refusal \(blindRefusal.rawValue)") }
        if let retryAfter { parts.append("retry after \(retryAfter)") }
        if let message, !message.isEmpty { parts.append(message) }
        if let underlying { parts.append("\(underlying)") }
        return parts.joined(separator: ": ")
    }

    /// Equal when everything but ``underlying`` is, and the underlying errors read the same.
    public static func == (lhs: ENSError, rhs: ENSError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.retryAfter == rhs.retryAfter && lhs.status == rhs.status
            && lhs.responseCode == rhs.responseCode && lhs.blindRefusal == rhs.blindRefusal
            && lhs.underlying.map { "\($0)" } == rhs.underlying.map { "\($0)" }
    }


    // The errors ENSKit makes, by code.
    static let invalidRequest = ENSError(code: .invalidRequest, status: 400, responseCode: "InvalidRequest")
    static let unauthorized = ENSError(code: .unauthorized, status: 401, responseCode: "Unauthorized")
    static let notFound = ENSError(code: .notFound, status: 404, responseCode: "NotFound")
    static let methodNotAllowed = ENSError(code: .methodNotAllowed, status: 405, responseCode: "MethodNotAllowed")
    static let payloadTooLarge = ENSError(code: .payloadTooLarge, status: 413, responseCode: "PayloadTooLarge")
    static let unsupportedMediaType = ENSError(code: .unsupportedMediaType, status: 415, responseCode: "UnsupportedMediaType")
    static let internalError = ENSError(code: .internalError, status: 500, responseCode: "InternalError")
    static let userNotFound = ENSError(code: .userNotFound, responseCode: "UserSubscriptionNotFound")
    static let updateFailed = ENSError(code: .updateFailed, responseCode: "UpdateFail")
    static let unusablePublicKey = ENSError(code: .unusablePublicKey)
    static let noDeviceSecret = ENSError(code: .noDeviceSecret)

    static func tooManyRequests(retryAfter: Duration?) -> ENSError {
        ENSError(code: .tooManyRequests, retryAfter: retryAfter, status: 429, responseCode: "TooManyRequests")
    }

    static func serviceUnavailable(retryAfter: Duration?) -> ENSError {
        ENSError(code: .serviceUnavailable, retryAfter: retryAfter, status: 503, responseCode: "ServiceUnavailable")
    }

    static func autodiscoverFailed(message: String) -> ENSError {
        ENSError(code: .autodiscoverFailed, message: message, responseCode: "AutodiscoverFailed")
    }

    static func exchangeAuthFailed(message: String) -> ENSError {
        ENSError(code: .exchangeAuthFailed, message: message, responseCode: "ExchangeAuthFailed")
    }

    static func exchangeError(message: String) -> ENSError {
        ENSError(code: .exchangeError, message: message, responseCode: "ExchangeError")
    }

    static func unexpectedAnswer(status: Int, responseCode: String?) -> ENSError {
        ENSError(code: .unexpectedAnswer, status: status, responseCode: responseCode)
    }

    /// An answer with a code the call accepts whose body lacks a member ENSKit needs, or
    /// has one of the wrong type or form: `what` names it (`'pubKey' is missing`).
    static func malformedAnswer(status: Int, responseCode: String?, _ what: String) -> ENSError {
        ENSError(code: .unexpectedAnswer, message: "malformed answer: \(what)", status: status, responseCode: responseCode)
    }

    static func blindRefused(_ refusal: ENSBlindRefusal, message: String) -> ENSError {
        ENSError(code: .blindRefused, message: message, status: 400, responseCode: "InvalidRequest", blindRefusal: refusal)
    }

    static func transport(_ error: ENSTransportError) -> ENSError {
        ENSError(code: .transport, underlying: error)
    }

    static func invalidArgument(_ what: String) -> ENSError {
        ENSError(code: .invalidArgument, message: what)
    }

    static func keyStore(_ error: ENSKeyStoreError) -> ENSError {
        ENSError(code: .keyStore, underlying: error)
    }
}

/// Why ENS refused a `blind` registration or `/updateprivacy` with a 400 that says why
/// (docs/api.md, `/registerdevicev2`, "blind").
public enum ENSBlindRefusal: String, Sendable, Equatable {
    /// No `privacyCertificate`.
    case missingCertificate
    /// Not an X.509 certificate.
    case notX509
    /// The certificate's key is not RSA.
    case notRSA
    /// The key is outside 2,048 to 4,096 bits.
    case keySize
    /// The certificate is not valid yet (the device's clock?).
    case notYetValid
    /// The certificate has expired or expires within a day.
    case expiring
    /// `/updateprivacy`: the sealed `privacyCertificateSHA256` does not name the certificate sent.
    case hashMismatch
    /// The mailbox has certificates for 8 devices already.
    case tooManyCertificates
    /// The mailbox is not Exchange Online (registered with `graphAccessToken`).
    case notExchangeOnline
    /// A reason this version of ENSKit does not know.
    case other

    /// The reason ENS names: its machine-readable `refusal` (since openapi 2.10), else,
    /// from a server before it, what its message says.
    init(refusal: String?, message: String) {
        if let refusal, let known = ENSBlindRefusal(rawValue: refusal), known != .other {
            self = known
            return
        }
        self.init(message: message)
    }

    /// The reason a message of a server before openapi 2.10 names.
    init(message: String) {
        let checks: [(String, ENSBlindRefusal)] = [
            ("Exchange Online", .notExchangeOnline), ("needs 'privacyCertificate'", .missingCertificate),
            ("must be an X.509", .notX509), ("RSA key", .notRSA), ("-bit key", .keySize), ("not valid yet", .notYetValid),
            ("expire", .expiring), ("SHA-256", .hashMismatch), ("for 8 devices", .tooManyCertificates), ("devices already", .tooManyCertificates),
        ]
        self = checks.first { message.contains($0.0) }?.1 ?? .other
    }
}
