internal import Codecs
public import ENSModel
public import OpenSSL

/// How ENS authenticates to Exchange for one mailbox. Alive only while a request or a
/// callback runs: it arrives in sealed `creds` or in a sealed callback URL and is
/// never stored, logged or described (`description` names the method only).
public struct EWSCredentials: Sendable, Equatable, CustomStringConvertible {
    public enum Method: Sendable, Equatable {
        case basic(userName: String, password: String)
        /// OAuth bearer token; Exchange Online also needs X-AnchorMailbox = the mailbox.
        case oauth(accessToken: String)
        /// TLS client certificate (certificate-based authentication, on-premises).
        case certificate(ClientIdentity)
    }

    public let method: Method
    /// The mailbox's SMTP address: for Autodiscover and X-AnchorMailbox. Nil in a
    /// callback whose credentials do not need it (only OAuth keeps it).
    public let mailbox: String?
    /// With `.oauth`: how to renew the access token when it expires (the device's
    /// refresh token, token endpoint and client id), if the device handed them over.
    public let refresh: OAuthRefresh?

    public init(method: Method, mailbox: String?, refresh: OAuthRefresh? = nil) {
        self.method = method
        self.mailbox = mailbox
        self.refresh = refresh
    }

    /// The same credentials with a new access token and what its refresh left
    /// (the rotated refresh token, the new expiry).
    public func refreshed(accessToken: String, refresh: OAuthRefresh) -> EWSCredentials {
        EWSCredentials(method: .oauth(accessToken: accessToken), mailbox: mailbox, refresh: refresh)
    }

    public var description: String {
        switch method {
        case .basic: "EWSCredentials(basic)"
        case .oauth: "EWSCredentials(oauth)"
        case .certificate: "EWSCredentials(certificate)"
        }
    }

    /// The HTTP authentication scheme the credentials answer (`WWW-Authenticate`); nil
    /// for a client certificate, which TLS asks for.
    var scheme: String? {
        switch method {
        case .basic: "Basic"
        case .oauth: "Bearer"
        case .certificate: nil
        }
    }

    /// HTTP headers that carry these credentials (none for a client certificate).
    var headers: [(String, String)] {
        switch method {
        case .basic(let userName, let password):
            return [("Authorization", "Basic " + Base64.encode(Array("\(userName):\(password)".utf8)))]
        case .oauth(let token):
            var headers = [("Authorization", "Bearer " + token)]
            if let mailbox { headers.append(("X-AnchorMailbox", mailbox)) }
            return headers
        case .certificate:
            return []
        }
    }
}
