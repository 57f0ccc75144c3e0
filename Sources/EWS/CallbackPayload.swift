internal import OpenSSL
internal import ENSModel

/// The credentials a callback uses to call back into the mailbox (GetItem, GetFolder),
/// stored sealed in the database (or, for subscriptions made before, sealed in the
/// callback URL itself: see ENSVault's CallbackToken). A compact tag-length-value
/// encoding: each field at most 65,535 bytes; a chain certificate may repeat.
public struct CallbackPayload: Sendable, Equatable {
    public let credentials: EWSCredentials

    public init(credentials: EWSCredentials) {
        self.credentials = credentials
    }

    private enum Tag: UInt8 {
        case method = 1, userName, password, accessToken, certificate, privateKey, mailbox, chainCertificate
        /// OAuth refresh (`OAuthRefresh`); the expiry is 8 bytes, big-endian milliseconds.
        case refreshToken, tokenEndpoint, clientID, scope, accessTokenExpiresAt
    }

    private static let format: UInt8 = 1

    public var encoded: [UInt8] {
        var bytes: [UInt8] = [Self.format]
        func field(_ tag: Tag, _ value: [UInt8]) {
            bytes += [tag.rawValue, UInt8(value.count >> 8), UInt8(value.count & 0xFF)] + value
        }
        switch credentials.method {
        case .basic(let userName, let password):
            field(.method, [1])
            field(.userName, Array(userName.utf8))
            field(.password, Array(password.utf8))
        case .oauth(let token):
            field(.method, [2])
            field(.accessToken, Array(token.utf8))
            // X-AnchorMailbox: the only reason a mailbox address ever rides along.
            if let mailbox = credentials.mailbox { field(.mailbox, Array(mailbox.utf8)) }
            if let refresh = credentials.refresh {
                field(.refreshToken, Array(refresh.refreshToken.utf8))
                field(.tokenEndpoint, Array(refresh.tokenEndpoint.utf8))
                field(.clientID, Array(refresh.clientID.utf8))
                if let scope = refresh.scope { field(.scope, Array(scope.utf8)) }
                if let expiry = refresh.accessTokenExpiresAt {
                    field(.accessTokenExpiresAt, (0..<8).map { UInt8(truncatingIfNeeded: expiry.millisecondsSinceEpoch >> (56 - 8 * $0)) })
                }
            }
        case .certificate(let identity):
            field(.method, [3])
            field(.certificate, identity.certificateDER)
            field(.privateKey, identity.privateKeyDER)
            for certificate in identity.chainDER { field(.chainCertificate, certificate) }
        }
        return bytes
    }

    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let problem: String
        public var description: String { "callback payload: \(problem)" }
    }

    public init(encoded bytes: [UInt8]) throws(Invalid) {
        guard bytes.first == Self.format else { throw Invalid(problem: "unknown format") }
        var fields: [Tag: [UInt8]] = [:]
        var chain: [[UInt8]] = []
        var index = 1
        while index < bytes.count {
            guard index + 3 <= bytes.count, let tag = Tag(rawValue: bytes[index]) else { throw Invalid(problem: "bad field header") }
            let length = Int(bytes[index + 1]) << 8 | Int(bytes[index + 2])
            guard index + 3 + length <= bytes.count else { throw Invalid(problem: "truncated field") }
            let value = Array(bytes[(index + 3)..<(index + 3 + length)])
            if tag == .chainCertificate {
                guard chain.count < ClientIdentity.maximumChainLength else { throw Invalid(problem: "too many chain certificates") }
                chain.append(value)
            } else {
                fields[tag] = value
            }
            index += 3 + length
        }
        func text(_ tag: Tag) throws(Invalid) -> String {
            guard let value = fields[tag], let text = String.validatedUTF8(value) else { throw Invalid(problem: "missing field \(tag)") }
            return text
        }
        let method: EWSCredentials.Method
        switch fields[.method] {
        case [1]?: method = .basic(userName: try text(.userName), password: try text(.password))
        case [2]?: method = .oauth(accessToken: try text(.accessToken))
        case [3]?:
            guard let certificate = fields[.certificate], let key = fields[.privateKey] else { throw Invalid(problem: "certificate fields missing") }
            method = .certificate(ClientIdentity(certificateDER: certificate, privateKeyDER: key, chainDER: chain))
        default: throw Invalid(problem: "unknown method")
        }
        var refresh: OAuthRefresh?
        if case .oauth = method, fields[.refreshToken] != nil {
            var expiry: Timestamp?
            if let bytes = fields[.accessTokenExpiresAt] {
                guard bytes.count == 8 else { throw Invalid(problem: "bad token expiry") }
                expiry = Timestamp(millisecondsSinceEpoch: bytes.reduce(Int64(0)) { $0 << 8 | Int64($1) })
            }
            refresh = OAuthRefresh(refreshToken: try text(.refreshToken), tokenEndpoint: try text(.tokenEndpoint), clientID: try text(.clientID),
                                   scope: fields[.scope] == nil ? nil : try text(.scope), accessTokenExpiresAt: expiry)
        }
        self.credentials = EWSCredentials(method: method, mailbox: fields[.mailbox].flatMap { String.validatedUTF8($0) }, refresh: refresh)
    }
}
