public import ENSHTTP
internal import ENSConfig
internal import POSIX
internal import Codecs
public import ENSModel
internal import ENSStore
internal import ENSVault
internal import Graph
internal import Logging
public import OpenSSL

/// Graph's `blind` mode, registration side: a device's certificate checked, and a rich
/// subscription (includeResourceData) that encrypts each new mail's sender and subject
/// to it, one per record and certificate (docs/privacy.md, "blind").
public enum BlindSubscriptions {
    /// Why a certificate cannot be used; the text is the 400's message, `refusal` its
    /// machine-readable code (docs/api.md, "blind").
    public struct Unusable: Error, Sendable, CustomStringConvertible {
        public let refusal: String
        public let description: String
    }

    /// RSA, 2,048 to 4,096 bits, valid now and for at least a day: Graph refuses other
    /// keys, and a certificate that expires would stop the device's notifications.
    public static func check(_ certificate: X509Certificate, now: Timestamp) throws(Unusable) {
        guard case .rsa(let bits) = certificate.keyAlgorithm else {
            throw Unusable(refusal: "notRSA", description: "Parameter 'privacyCertificate' must hold an RSA key; Graph encrypts only to RSA.")
        }
        guard (2048...4096).contains(bits) else {
            throw Unusable(refusal: "keySize", description: "Parameter 'privacyCertificate' has a \(bits)-bit key; Graph needs 2,048 to 4,096 bits.")
        }
        let seconds = now.millisecondsSinceEpoch / 1000
        guard certificate.notBefore <= seconds + 300 else { throw Unusable(refusal: "notYetValid",
                                                                           description: "Parameter 'privacyCertificate' is not valid yet.") }
        guard certificate.notAfter > seconds + 86_400 else {
            throw Unusable(refusal: "expiring", description: "Parameter 'privacyCertificate' has expired or expires within a day.")
        }
    }

    /// Base64 of the DER certificate, or its PEM text.
    public static func certificate(from text: String) throws(Unusable) -> X509Certificate {
        let unusable = Unusable(refusal: "notX509",
                                description: "Parameter 'privacyCertificate' must be an X.509 certificate: base64 of its DER form, or PEM.")
        let der: [UInt8]?
        let armour = text.split(separator: "-----", omittingEmptySubsequences: false)
        if let begin = armour.firstIndex(of: "BEGIN CERTIFICATE"), begin + 1 < armour.count {
            der = Base64.decodeLenient(String(armour[begin + 1]))
        } else {
            der = Base64.decodeLenient(text)
        }
        guard let der, der.count <= 8192 else { throw unusable }
        do {
            return try X509Certificate(der: der)
        } catch {
            throw unusable
        }
    }

    /// What `ensure` did.
    public enum Outcome: Sendable, Equatable {
        case ready
        /// The record is not a Graph mailbox (an Exchange one cannot be `blind`).
        case notGraph
        /// The record already has rich subscriptions for `maximumPerRecord` certificates.
        case tooManyCertificates
        case failed
    }

    /// The most certificates one record may have rich subscriptions for (each is a
    /// subscription at Graph, and a notification per new mail for each).
    public static let maximumPerRecord = 8

    /// Makes sure Graph encrypts the record's new mail to `certificate`: the record's
    /// rich subscription for it, created if missing. With `replacing` (a device's
    /// previous certificate) a subscription no other device uses is moved to the new
    /// certificate instead (PATCH), and keeps accepting the old one until its next
    /// renewal, so nothing in flight is lost.
    public static func ensure(recordID: Int64, certificate: X509Certificate,
                              replacing previous: [UInt8]?, context: RequestContext) throws -> Outcome {
        let settings = context.settings.graph
        guard let services = context.services.graph, let mailbox = try GraphSubscriptionStore(database: context.database).mailbox(recordID: recordID),
              let record = try MailSubscriptionStore(database: context.database, vault: context.services.vault).callbackRecord(id: recordID),
              record.backend == .graph else { return .notGraph }
        // The tenant and user path the rich subscription is made for come from this row:
        // one a database writer edited gets no subscription (logged).
        guard record.isAuthentic(RowBinding(vault: context.services.vault)) else {
            context.logger.error("blind subscription refused: the record's row fails its integrity check", metadata: ["record": "\(recordID)"])
            return .failed
        }
        guard let application = services.applications.application(tenantID: mailbox.tenantID), !settings.callbackURL.isEmpty else {
            context.logger.error("blind subscription impossible: the record's tenant is not configured or graph.callback_url is unset",
                                 metadata: ["record": "\(recordID)"])
            return .failed
        }
        let store = GraphBlindStore(database: context.database, vault: context.services.vault)
        let now = Timestamp.now()
        let thumbprint = certificate.thumbprint.sha256
        if let existing = try store.subscription(recordID: recordID, thumbprint: thumbprint), existing.subscriptionID != nil,
           (existing.expiresAt?.millisecondsSinceEpoch ?? 0) > now.millisecondsSinceEpoch {
            return .ready
        }
        let client = try context.graphClient()
        let lifetime = min(settings.subscriptionLifetime, richLifetime)
        let certificateID = Self.certificateID(of: certificate)
        // A rotation: the device's old subscription, if it is the only one using it.
        if let previous, previous != thumbprint, let old = try store.subscription(recordID: recordID,
                                                                                  thumbprint: previous), let id = old.subscriptionID,
           try store.deviceCount(recordID: recordID, thumbprint: previous) <= 1 {
            let rich = RichNotifications(selected: selection(of: old.resource), certificate: certificate.der, certificateID: certificateID)
            do {
                let patched = try client.rotateCertificate(id: id,
                    to: rich, until: now.adding(lifetime), application: application, deadline: context.graphDeadline)
                try store.rotated(old, to: thumbprint, certificate: certificate.der,
                                  certificateID: certificateID, expiresAt: patched.expiresAt, now: now)
                context.logger.info("blind subscription moved to a new certificate", metadata: ["record": "\(recordID)", "blind": "\(old.id)"])
                return .ready
            } catch {
                context.logger.warning("blind certificate rotation failed; creating a subscription for the new certificate", metadata: [
                    "record": "\(recordID)", "error": "\(error)",
                ])
            }
        }
        let others = try store.subscriptions(recordID: recordID)
        guard others.count < maximumPerRecord || others.contains(where: { $0.thumbprint == thumbprint }) else {
            context.logger.warning("blind subscription refused: the record has the most certificates allowed", metadata: ["record": "\(recordID)"])
            return .tooManyCertificates
        }
        // Graph refuses a second subscription with the same resource (409): each of the
        // record's certificates selects the same properties in another order.
        let used = Set(others.filter { $0.thumbprint != thumbprint }.map(\.resource))
        let selected = (0..<maximumPerRecord).lazy.map(ordering).first { !used.contains(Self.resource(userPath: mailbox.userPath, selected: $0)) }
            ?? RichNotifications.blindProperties
        let rich = RichNotifications(selected: selected, certificate: certificate.der, certificateID: certificateID)
        let resourcePath = Self.resource(userPath: mailbox.userPath, selected: selected)
        if let stale = try store.subscription(recordID: recordID, thumbprint: thumbprint) {
            try store.delete(id: stale.id)  // reserved by an attempt that failed or expired
        }
        guard let blindID = try store.reserve(recordID: recordID, thumbprint: thumbprint, certificate: certificate.der, certificateID: certificateID,
                                              resource: resourcePath, now: now) else {
            context.logger.info("blind subscription being created by another request", metadata: ["record": "\(recordID)"])
            return .failed
        }
        do {
            let request = SubscriptionRequest(
                userPath: mailbox.userPath,
                notificationURL: settings.callbackURL + (try RoutingToken(recordID: recordID, blindID: blindID,
                                                                          bucket: context.urlBucket(userID: record.userID))
                    .blindPath(vault: context.services.vault)),
                clientState: context.services.vault.graphBlindClientState(recordID: recordID, blindID: blindID),
                expiresAt: now.adding(lifetime), encryption: rich
            )
            let created = try client.createSubscription(request, application: application, deadline: context.graphDeadline)
            try store.subscribed(id: blindID, subscriptionID: created.id, expiresAt: created.expiresAt, now: now)
            context.logger.info("blind subscription created", metadata: ["record": "\(recordID)", "blind": "\(blindID)"])
            return .ready
        } catch {
            try store.delete(id: blindID)
            context.logger.warning("blind subscription failed", metadata: ["record": "\(recordID)", "error": "\(error)"])
            return .failed
        }
    }

    /// The `encryptionCertificateId` ENS gives Graph for a certificate: the first 16
    /// bytes of its SHA-256, in lowercase hex. Opaque to Graph, and a device computes it
    /// from its own certificate to pick the key a notification is encrypted to.
    public static func certificateID(of certificate: X509Certificate) -> String {
        Hex.encode(Array(certificate.thumbprint.sha256.prefix(16)))
    }

    /// Graph's cap for rich Outlook subscriptions: under a day.
    public static let richLifetime: Duration = .minutes(1440 - 10)

    static func resource(userPath: String, selected: [String]) -> String {
        SubscriptionRequest(userPath: userPath, notificationURL: "", clientState: "", expiresAt: .now(),
                            encryption: RichNotifications(selected: selected, certificate: [], certificateID: "")).resource
    }

    /// The `$select` list of a stored resource.
    static func selection(of resource: String) -> [String] {
        let query = resource.split(separator: "?", maxSplits: 1).dropFirst().first ?? ""
        guard query.hasPrefix("$select=") else { return RichNotifications.blindProperties }
        let list = query.dropFirst("$select=".count).split(separator: ",").map(String.init)
        return list.isEmpty ? RichNotifications.blindProperties : list
    }

    /// The `index`th order of the blind properties (a rotation, then a swap of the
    /// first two): distinct for every index below `maximumPerRecord`.
    static func ordering(_ index: Int) -> [String] {
        let base = RichNotifications.blindProperties
        let shift = index % base.count
        var rotated = Array(base[shift...] + base[..<shift])
        if index >= base.count { rotated.swapAt(0, 1) }
        return rotated
    }
}
