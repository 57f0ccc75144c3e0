public import Foundation

/// How the device signs in to the user's mailbox: exactly one way per registration
/// (docs/api.md, `/registerdevicev2`). ENS uses them to prove the mailbox is the user's
/// and keeps them sealed; ENSKit only seals them and never logs them.
public enum ENSCredentials: Sendable, Equatable, CustomStringConvertible {
    /// Basic authentication at Exchange (`userName`, `password`).
    case password(userName: String, password: String)
    /// An OAuth access token for EWS, with the refresh grant ENS may use to renew it
    /// (`oauthAccessToken`, `oauthRefresh`).
    case oauth(accessToken: String, refresh: ENSOAuthRefresh? = nil)
    /// A client certificate: the PKCS#12 bundle and its password (`CBAData`).
    case certificate(pkcs12: Data, password: String)
    /// A delegated Microsoft Graph access token for an Exchange Online mailbox
    /// (`graphAccessToken`); ENS reads `/me` once with it and forgets it.
    case graph(accessToken: String)

    /// The sealed members, without the push token.
    func members() throws(ENSError) -> CredentialMembers {
        switch self {
        case .password(let userName, let password):
            guard !userName.isEmpty, !password.isEmpty else { throw .invalidArgument("an empty user name or password") }
            return CredentialMembers(userName: userName, password: password)
        case .oauth(let accessToken, let refresh):
            guard !accessToken.isEmpty else { throw .invalidArgument("an empty OAuth access token") }
            return CredentialMembers(oauthAccessToken: accessToken, oauthRefresh: try refresh?.members())
        case .certificate(let pkcs12, let password):
            guard !pkcs12.isEmpty else { throw .invalidArgument("an empty PKCS#12 bundle") }
            return CredentialMembers(cbaData: CBADataMembers(certificate: pkcs12.base64EncodedString(), password: password))
        case .graph(let accessToken):
            guard !accessToken.isEmpty else { throw .invalidArgument("an empty Graph access token") }
            return CredentialMembers(graphAccessToken: accessToken)
        }
    }

    /// Names the kind only: credentials are never printed.
    public var description: String {
        switch self {
        case .password: return "ENSCredentials.password(…)"
        case .oauth(_, let refresh): return refresh == nil ? "ENSCredentials.oauth(…)" : "ENSCredentials.oauth(…, refresh: …)"
        case .certificate: return "ENSCredentials.certificate(…)"
        case .graph: return "ENSCredentials.graph(…)"
        }
    }
}

/// The refresh grant ENS may use to renew an expired OAuth access token: it exchanges
/// `refreshToken` at `tokenEndpoint` as a public client `clientID`, and keeps the
/// rotated one (docs/exchange.md, "OAuth refresh").
public struct ENSOAuthRefresh: Sendable, Equatable, CustomStringConvertible {
    public var refreshToken: String
    /// An https URL.
    public var tokenEndpoint: URL
    public var clientID: String
    /// Space-separated scopes; nil asks for the original grant's.
    public var scope: String?

    public init(refreshToken: String, tokenEndpoint: URL, clientID: String, scope: String? = nil) {
        self.refreshToken = refreshToken
        self.tokenEndpoint = tokenEndpoint
        self.clientID = clientID
        self.scope = scope
    }

    func members() throws(ENSError) -> OAuthRefreshMembers {
        guard tokenEndpoint.scheme?.lowercased() == "https" else { throw .invalidArgument("the token endpoint must be an https URL") }
        guard !refreshToken.isEmpty, !clientID.isEmpty, scope?.isEmpty != true else {
            throw .invalidArgument("an empty refresh token, client id or scope")
        }
        return OAuthRefreshMembers(refreshToken: refreshToken, tokenEndpoint: tokenEndpoint.absoluteString, clientId: clientID, scope: scope)
    }

    public var description: String { "ENSOAuthRefresh(…)" }
}

/// A device's privacy mode (docs/privacy.md): what Apple's and Google's push services
/// see of a new mail. Ordered from the most they see to the least.
public enum ENSPrivacyMode: String, Sendable, CaseIterable, Comparable {
    /// Sender, subject, badge and sync key in the push (the default).
    case preview
    /// "New mail" and the badge.
    case generic
    /// "New mail"; the content sealed to the device's P-256 key in `ens.enc`.
    case encrypted
    /// "New mail" and the notification id; the app fetches the content once.
    case secure
    /// Exchange Online (Graph) only: "New mail"; Microsoft Graph encrypts the sender and
    /// subject to the device's own certificate (``ENSBlindKey``) and ENS relays the
    /// ciphertext without being able to open it.
    case blind

    public static func < (lhs: Self, rhs: Self) -> Bool {
        allCases.firstIndex(of: lhs) ?? 0 < allCases.firstIndex(of: rhs) ?? 0
    }
}

/// One `/registerdevicev2`.
public struct ENSRegistration: Sendable {
    /// The user; its `email` is required (ENS proves the mailbox of that address).
    public var user: ENSUser
    public var token: ENSPushToken
    public var credentials: ENSCredentials
    /// The mailbox's EWS URL, when the app knows it; otherwise ENS autodiscovers.
    public var ewsURL: URL?
    /// A Dovecot mailbox's IMAP server (`imaps://host:port/`), with
    /// ``ENSCredentials/password(userName:password:)`` whose user name is the address;
    /// otherwise ENS finds the server its operator registered for the address's domain
    /// (docs/dovecot.md). Never with `ewsURL`.
    public var imapURL: URL?
    /// The privacy mode to ask for; nil keeps the device's (`preview` for a new one).
    /// For `encrypted`, ``ENSClient`` makes and keeps the device's P-256 key.
    public var privacy: ENSPrivacyMode?
    /// Subscribe anew even when the user is subscribed.
    public var force: Bool
    /// The Exchange schema version to try first (`0`–`6`, or a product year).
    public var exchangeVersion: Int?
    /// A sound name to put in notifications.
    public var defaultSound: String?
    /// The EAS device id, for the operator's SEG policy check.
    public var ewsDeviceID: String?

    public init(user: ENSUser, token: ENSPushToken, credentials: ENSCredentials, ewsURL: URL? = nil, imapURL: URL? = nil,
                privacy: ENSPrivacyMode? = nil, force: Bool = false, exchangeVersion: Int? = nil, defaultSound: String? = nil,
                ewsDeviceID: String? = nil) {
        self.user = user
        self.token = token
        self.credentials = credentials
        self.ewsURL = ewsURL
        self.imapURL = imapURL
        self.privacy = privacy
        self.force = force
        self.exchangeVersion = exchangeVersion
        self.defaultSound = defaultSound
        self.ewsDeviceID = ewsDeviceID
    }
}

/// ENS's dates: UTC, `MM/dd/yyyy HH:mm:ss.SSS`.
enum ENSDate {
    private static func formatter() -> DateFormatter {
        // A new formatter per use: DateFormatter is not Sendable, and these are rare.
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.calendar = Calendar(identifier: .gregorian)
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "MM/dd/yyyy HH:mm:ss.SSS"
        return formatter
    }

    static func string(_ date: Date) -> String { formatter().string(from: date) }
    static func date(_ text: String) -> Date? { formatter().date(from: text) }
}
