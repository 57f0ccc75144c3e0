/// Everything an ``ENSClient`` call can fail with: one case per documented response code
/// of ENS (docs/api.md, "Errors", and the business outcomes that are failures for the
/// call that got them), plus what happens on this side (transport, sealing, key store).
///
/// Act on the case, never on a message: ENS's `message` is for people and may change.
public enum ENSError: Error, Sendable, Equatable {
    /// 400 `InvalidRequest`. ENS answers every cause with the same bytes, a sealed
    /// parameter's failure included, so nothing more can be said; ENSKit checks what it
    /// can before sending. A retry with the same input fails the same way.
    case invalidRequest
    /// 401 `Unauthorized`: the `ApiToken` is missing, unknown or revoked.
    case unauthorized
    /// 404 `NotFound`: no such endpoint at the configured base URL.
    case notFound
    /// 405 `MethodNotAllowed`.
    case methodNotAllowed
    /// 413 `PayloadTooLarge`: the body is over 64 KiB.
    case payloadTooLarge
    /// 415 `UnsupportedMediaType`.
    case unsupportedMediaType
    /// 429 `TooManyRequests`, after the retries the configuration allows. `retryAfter`
    /// is the server's `Retry-After`, in seconds, when it sent one.
    case tooManyRequests(retryAfter: Int?)
    /// 500 `InternalError`.
    case internalError
    /// 503 `ServiceUnavailable`, after the retries the configuration allows: nothing of
    /// the request was applied.
    case serviceUnavailable(retryAfter: Int?)
    /// `UserSubscriptionNotFound` where it is a failure: ENS has no record for the user,
    /// or (for the device's own operations) does not know this device or its secret.
    /// The app registers again.
    case userNotFound
    /// `UpdateFail`: the device is not registered (or its secret is not its own), the
    /// old token is unknown, or a sync key was refused.
    case updateFailed
    /// `AutodiscoverFailed`: ENS found no Exchange for the address.
    case autodiscoverFailed(message: String)
    /// `ExchangeAuthFailed`: Exchange (or Microsoft Graph) refused the credentials, or
    /// they open another mailbox.
    case exchangeAuthFailed(message: String)
    /// `ExchangeError`: Exchange could not be subscribed.
    case exchangeError(message: String)
    /// An answer ENS never sends to this call: an unknown `responseCode`, a status that
    /// does not go with it, a body that is not ENS's JSON, a missing or malformed field.
    /// ENSKit refuses it rather than guess.
    case unexpectedAnswer(status: Int, responseCode: String?)
    /// 400 about the blind mode, the only 400s ENS words (the certificate is public and
    /// never sealed): what is wrong with `privacyCertificate`, or with the mailbox for
    /// the mode. `message` is ENS's text, for people.
    case blindRefused(ENSBlindRefusal, message: String)
    /// The request did not get an HTTP response.
    case transport(ENSTransportError)
    /// A value ENSKit was asked to send cannot be sent (a token of the wrong form, a
    /// plaintext too long for its sealed parameter, a sync key over 512 bytes ...).
    case invalidArgument(String)
    /// The user's public key from ENS is not an RSA key of 2048 bits or more.
    case unusablePublicKey
    /// The device has no `deviceSecret` for this user: it registered without ENSKit, or
    /// its key store was wiped. Register again (ENSKit then makes and sends one).
    case noDeviceSecret
    /// The key store failed.
    case keyStore(ENSKeyStoreError)
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
