internal import Codecs
public import ENSModel
internal import OpenSSL
internal import POSIX

/// ENS's application in one Entra tenant: the tenant, the mail domains that live there,
/// the application (client) id, and the certificate and key it authenticates with. The
/// key signs client assertions (RFC 7523, RS256, the certificate's thumbprint in the
/// header) and never leaves this value.
public struct GraphApplication: Sendable {
    public let name: String
    public let tenantID: String
    public let clientID: String
    public let domains: [String]
    let thumbprint: CertificateThumbprint
    let key: RSASigningKey

    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let problem: String
        public var description: String { problem }
    }

    /// Reads the tenant's certificate and key files; refuses a key that does not match
    /// the certificate (an assertion signed with it would be refused at every request).
    public init(settings: GraphTenantSettings) throws(Invalid) {
        let certificate: [UInt8]
        let keyPEM: [UInt8]
        do {
            certificate = try Files.read(settings.certificateFile, limit: 64 * 1024)
            keyPEM = try Files.read(settings.keyFile, limit: 64 * 1024)
        } catch {
            throw Invalid(problem: "tenant \(settings.name): cannot read its certificate or key file: \(error)")
        }
        do {
            let identity = try ClientIdentity(pem: certificate + [0x0A] + keyPEM)
            thumbprint = try CertificateThumbprint(certificateDER: identity.certificateDER)
            key = try RSASigningKey(pem: String(decoding: keyPEM, as: UTF8.self))
        } catch {
            throw Invalid(problem: "tenant \(settings.name): the certificate and key do not make an RSA identity of 2048 bits or more " +
                                   "(\(error.operation))")
        }
        name = settings.name
        tenantID = settings.tenantID
        clientID = settings.clientID
        domains = settings.domains
    }

    /// Whether a mailbox's domain belongs to this tenant.
    public func serves(mailbox: String) -> Bool {
        guard let at = mailbox.lastIndex(of: "@") else { return false }
        return domains.contains(mailbox[mailbox.index(after: at)...].lowercased())
    }

    /// A client assertion for the tenant's token endpoint (`audience`): RS256 with the
    /// certificate's SHA-1 thumbprint as `x5t`, issuer and subject the client id, a
    /// random `jti`, valid for ten minutes from `now` (seconds since the epoch).
    func assertion(audience: String, now: Int64) throws(OpenSSLError) -> String {
        var header = JSONObjectWriter()
        header.add("alg", "RS256")
        header.add("typ", "JWT")
        header.add("x5t", Base64.encodeURLSafe(thumbprint.sha1))
        var claims = JSONObjectWriter()
        claims.add("aud", audience)
        claims.add("iss", clientID)
        claims.add("sub", clientID)
        claims.add("jti", Hex.encode(try Digest.randomBytes(16)))
        claims.add("nbf", Int(now))
        claims.add("iat", Int(now))
        claims.add("exp", Int(now + 600))
        let signingInput = Base64.encodeURLSafe(header.finished()) + "." + Base64.encodeURLSafe(claims.finished())
        return signingInput + "." + Base64.encodeURLSafe(try key.signRS256(Array(signingInput.utf8)))
    }
}

/// The configured applications, by tenant id, and which one serves a mailbox.
public struct GraphApplications: Sendable {
    public let all: [GraphApplication]

    public init(_ applications: [GraphApplication]) {
        all = applications
    }

    public init(settings: [GraphTenantSettings]) throws(GraphApplication.Invalid) {
        all = try settings.map { settings throws(GraphApplication.Invalid) in try GraphApplication(settings: settings) }
    }

    public var isEmpty: Bool { all.isEmpty }

    public func application(serving mailbox: String) -> GraphApplication? {
        all.first { $0.serves(mailbox: mailbox) }
    }

    public func application(tenantID: String) -> GraphApplication? {
        all.first { $0.tenantID == tenantID }
    }
}
