internal import ENSHTTP
internal import ENSConfig
internal import ENSStore
internal import Codecs
internal import ENSModel
internal import ENSVault
internal import Logging
internal import OpenSSL
internal import MailBackends

/// The device API's private-notification endpoints (docs/api.md, docs/privacy.md):
/// choosing a privacy mode, fetching a `secure` notification's content, and the
/// history. Each is a sealed device operation whose sealed object names the device by
/// `pushToken`, the proof every device operation takes; a device sees only its own
/// notifications.
enum PrivateNotifications {
    // MARK: The device, proved by its secret

    /// The record's device this sealed `info` names by `pushToken`, if the `info` also
    /// carries that device's own secret (`deviceSecret`, registered with its `creds`).
    /// The push token alone proves nothing: Apple and Google hold it. A device without
    /// a secret, a wrong secret and an unknown token are all nil, answered alike.
    static func provenDevice(_ info: [String: JSONValue], operation: DeviceAPI.SealedOperation, context: RequestContext) throws -> DeviceRecord? {
        let token = try info.sealedToken("pushToken")
        guard let secret = try DeviceSecret.sent(in: info) else { throw APIError.sealedParameterRejected }
        let presented = context.services.vault.deviceSecretHash(secret)
        guard let device = try operation.device(token), let stored = device.secretHash, Digest.constantTimeEqual(stored, presented) else {
            context.logger.info("private-notification operation refused: no device with this token and secret")
            return nil
        }
        return device
    }

    // MARK: Privacy modes

    /// The privacy a registration or /updateprivacy asks for: `privacy` (a mode's name)
    /// with, for `encrypted`, `privacyKey` (base64 of the P-256 public key) and, for
    /// `blind`, `privacyCertificate` (the device's X.509 certificate, base64 DER or
    /// PEM). Nil when no mode is given; 400 for anything else. For `blind` the
    /// certificate comes back too: the rich subscription is made from it.
    static func requestedPrivacy(mode: String?, key: String?, certificate: String? = nil) throws(APIError) -> (DevicePrivacy, X509Certificate?)? {
        let mode = DeviceAPI.nonEmpty(mode)
        let key = DeviceAPI.nonEmpty(key)
        let certificate = DeviceAPI.nonEmpty(certificate)
        guard let mode else {
            if key != nil { throw .invalidRequest("Parameter 'privacyKey' is only for privacy 'encrypted'.") }
            if certificate != nil { throw APIError(400, .invalidRequest, "Parameter 'privacyCertificate' is only for privacy 'blind'.") }
            return nil
        }
        guard let chosen = PrivacyMode(name: mode) else {
            throw .invalidRequest("Parameter 'privacy' must be one of preview, generic, encrypted, secure, blind.")
        }
        if chosen != .blind, certificate != nil { throw APIError(400, .invalidRequest,
                                                                 "Parameter 'privacyCertificate' is only for privacy 'blind'.") }
        switch (chosen, key) {
        case (.encrypted, let key?):
            do {
                return (DevicePrivacy(mode: .encrypted, previewKey: try PreviewEncryption.recipientKey(base64: key).x963), nil)
            } catch {
                throw .invalidRequest("Parameter 'privacyKey' must be a P-256 public key: base64 of its 65-byte uncompressed point or its DER " +
                                      "SubjectPublicKeyInfo.")
            }
        case (.encrypted, nil):
            throw .invalidRequest("Privacy 'encrypted' needs 'privacyKey', the device's P-256 public key.")
        case (_, .some):
            throw .invalidRequest("Parameter 'privacyKey' is only for privacy 'encrypted'.")
        case (.blind, nil):
            guard let certificate else {
                throw APIError(400, .invalidRequest, "Privacy 'blind' needs 'privacyCertificate', the X.509 certificate of the device's RSA key.",
                               refusal: "missingCertificate")
            }
            do throws(BlindSubscriptions.Unusable) {
                let parsed = try BlindSubscriptions.certificate(from: certificate)
                try BlindSubscriptions.check(parsed, now: .now())
                return (DevicePrivacy(mode: .blind, previewKey: parsed.thumbprint.sha256), parsed)
            } catch {
                // Not the contract's uniform 400: the certificate is public and was not
                // sealed, so saying what is wrong with it tells an attacker nothing.
                throw APIError(400, .invalidRequest, error.description, refusal: error.refusal)
            }
        case (_, nil):
            return (DevicePrivacy(mode: chosen, previewKey: nil), nil)
        }
    }

    /// The privacy a registration asks for. Its place is inside the sealed `creds`
    /// (`privacy`, `privacyKey`, and `privacyCertificateSHA256` naming the clear
    /// `privacyCertificate`), where no one who saw or holds the request can change it;
    /// clear `privacy` and `privacyKey` parameters must then be absent or the same. The
    /// clear parameters alone (the form before 2026-11-29) still choose the mode of a
    /// new device and confirm an existing device's mode; they never change it (a
    /// request log's body with `privacy=preview` swapped in). With unbound `creds`
    /// (clients without a device secret, whose values anyone who saw them can resend),
    /// they carry no key material (no `privacyKey`, no certificate: a resent body
    /// must not re-key a device to someone else's key) and may only raise an existing
    /// device's mode. Everything else is the uniform 400, the cause in the debug log.
    static func registrationPrivacy(_ parameters: Parameters, creds: SealedUse.Checked, existing: DeviceRecord?,
                                    logger: Logger) throws(APIError) -> (DevicePrivacy, X509Certificate?)? {
        let clearMode = DeviceAPI.nonEmpty(parameters["privacy"])
        let clearKey = DeviceAPI.nonEmpty(parameters["privacyKey"])
        let certificate = parameters["privacyCertificate"]
        if let sealedMode = creds.members["privacy"] {
            guard let mode = sealedMode.stringValue else { throw .sealedParameterRejected }
            let key = creds.members["privacyKey"]?.stringValue
            guard clearMode == nil || clearMode == mode, clearKey == nil || clearKey == key else {
                throw .invalidRequest("clear privacy parameters differ from the sealed ones")
            }
            guard let requested = try requestedPrivacy(mode: mode, key: key, certificate: certificate) else { return nil }
            if let parsed = requested.1 {
                guard let named = creds.members["privacyCertificateSHA256"]?.stringValue, let hash = Hex.decode(named),
                      Digest.constantTimeEqual(hash, parsed.thumbprint.sha256) else {
                    throw APIError(400, .invalidRequest,
                                   "The sealed 'creds' must name 'privacyCertificate' by its SHA-256 ('privacyCertificateSHA256', hex).",
                                   refusal: "hashMismatch")
                }
            }
            return requested
        }
        guard creds.members["privacyKey"] == nil, creds.members["privacyCertificateSHA256"] == nil else { throw .sealedParameterRejected }
        guard let requested = try requestedPrivacy(mode: clearMode, key: clearKey, certificate: certificate) else { return nil }
        let confirms = existing.map { $0.privacy == requested.0 } ?? false
        if !creds.isBound && !confirms {
            guard requested.0.previewKey == nil, requested.1 == nil else {
                throw .invalidRequest("a privacy key or certificate in clear needs bound creds")
            }
            if let existing, requested.0.mode.rawValue < existing.privacy.mode.rawValue || existing.privacy.mode == .blind {
                logger.warning("registration refused: an unbound registration would lower a device's mode", metadata: ["device": "\(existing.id)"])
                throw .invalidRequest("an unbound registration cannot lower a device's mode")
            }
            return requested
        }
        if let existing, !confirms {
            logger.warning("registration refused: a clear privacy parameter would change an existing device's mode",
                           metadata: ["device": "\(existing.id)"])
            throw .invalidRequest("a clear privacy parameter cannot change an existing device's mode")
        }
        return requested
    }

    /// Makes Graph encrypt to a `blind` device's certificate before the device is
    /// stored in that mode; an error answer when it cannot.
    static func prepareBlind(_ certificate: X509Certificate, recordID: Int64, replacing previous: [UInt8]?,
                             context: RequestContext) throws -> APIResponse? {
        switch try BlindSubscriptions.ensure(recordID: recordID, certificate: certificate, replacing: previous, context: context) {
        case .ready: return nil
        case .notGraph:
            return APIResponse.error(400, .invalidRequest, "Privacy 'blind' is for Exchange Online mailboxes (registered with graphAccessToken).",
                                     refusal: "notExchangeOnline")
        case .tooManyCertificates:
            return APIResponse.error(400, .invalidRequest,
                "This mailbox has blind certificates for \(BlindSubscriptions.maximumPerRecord) devices already: reuse one of them.",
                                     refusal: "tooManyCertificates")
        case .failed:
            return .ok(.exchangeError, [("message", "Graph could not create the encrypted subscription for this certificate; try again later.")])
        }
    }

    /// The mode a device's pushes will use under the operator's floor.
    static func effective(_ privacy: DevicePrivacy, context: RequestContext) -> PrivacyMode {
        privacy.mode.raised(to: context.settings.privacy.minimumMode, hasPreviewKey: privacy.previewKey != nil)
    }

    /// POST /updateprivacy: `info` sealed {"pushToken", "privacy", "privacyKey"}.
    /// UpdateSuccess with the mode the device's pushes now use (`privacy`), UpdateFail
    /// for a device the record does not have. For `blind` the certificate (about a
    /// kilobyte, more than a small sealed object holds) is the form parameter
    /// `privacyCertificate`, and the sealed `info` names it by its SHA-256
    /// (`privacyCertificateSHA256`, hex), so that no one can swap it.
    static let updatePrivacy = DeviceAPI.sealedOperation(parameter: "info", use: .updatePrivacy) { operation, request, context in
        let info = try operation.object()
        let named = info["privacyCertificateSHA256"]?.stringValue
        let sent = DeviceAPI.nonEmpty(request.parameters["privacyCertificate"])
        guard let (privacy, certificate) = try requestedPrivacy(mode: info["privacy"]?.stringValue ?? "", key: info["privacyKey"]?.stringValue,
                                                              certificate: sent) else {
            throw APIError.invalidRequest("The sealed 'info' must name a 'privacy' mode.")
        }
        if let certificate {
            guard let named, let hash = Hex.decode(named), Digest.constantTimeEqual(hash, certificate.thumbprint.sha256) else {
                throw APIError(400, .invalidRequest,
                               "The sealed 'info' must name 'privacyCertificate' by its SHA-256 ('privacyCertificateSHA256', hex).",
                               refusal: "hashMismatch")
            }
        }
        guard let device = try provenDevice(info, operation: operation, context: context) else { return .ok(.updateFail) }
        if let certificate, let refusal = try prepareBlind(certificate, recordID: operation.record.id, replacing: device.privacy.blindThumbprint,
                                                           context: context) {
            return refusal
        }
        try operation.store.setPrivacy(device, recordID: operation.record.id, privacy)
        context.logger.info("device privacy mode changed", metadata: ["device": "\(device.id)", "privacy": "\(privacy.mode.name)"])
        return .ok(.updateSuccess, [("privacy", effective(privacy, context: context).name)])
    }

    // MARK: Secure fetch

    /// POST /getnotification: `info` sealed {"pushToken", "id"}. The content of one of
    /// this device's `secure` notifications, erased as it is answered. Another device's
    /// notification, an unknown id, one already fetched and one expired all answer the
    /// same NotificationNotFound, so the answer tells nothing about other devices.
    static let getNotification = DeviceAPI.sealedOperation(parameter: "info", use: .getNotification) { operation, request, context in
        let info = try operation.object()
        let id = try info.sealedString("id")
        let log = context.notificationLog
        guard let device = try provenDevice(info, operation: operation, context: context),
              let content = try log.takeContent(notificationID: id.lowercased(), deviceID: device.id, now: .now()) else {
            return .ok(.notificationNotFound)
        }
        return .json(.notificationFound) { answer in
            answer.add("id", id.lowercased())
            answer.add("content", rawJSON: content)
        }
    }

    // MARK: History

    /// POST /getnotificationhistory: `info` sealed {"pushToken", "limit"}. The device's
    /// newest notifications (at most `limit` and history.count), newest first.
    static let history = DeviceAPI.sealedOperation(parameter: "info", use: .history) { operation, request, context in
        let info = try operation.object()
        let settings = context.settings.privacy
        var limit = settings.historyCount
        if let asked = info["limit"] {
            guard let text = asked.scalarText, let number = Int(text), number >= 1 else { throw APIError.sealedParameterRejected }
            limit = min(limit, number)
        }
        guard let device = try provenDevice(info, operation: operation, context: context) else { return .ok(.userSubscriptionNotFound) }
        let now = Timestamp.now()
        let entries = try context.notificationLog
            .history(deviceID: device.id, limit: limit, since: now.subtracting(settings.historyRetention))
        var list: [UInt8] = [UInt8(ascii: "[")]
        for (index, entry) in entries.enumerated() {
            if index > 0 { list.append(UInt8(ascii: ",")) }
            var item = JSONObjectWriter()
            item.add("id", entry.notificationID)
            item.add("ts", Int(entry.createdAt.millisecondsSinceEpoch))
            // The logged {"sender","subject"}, member by member into this entry.
            let summary = try? JSONParser.parse(entry.summary)
            item.add("sender", summary?["sender"]?.stringValue ?? "")
            item.add("subject", summary?["subject"]?.stringValue ?? "")
            item.add("read", entry.readAt == nil ? 0 : 1)
            list += item.finished()
        }
        list.append(UInt8(ascii: "]"))
        return .json(.notificationHistory) { answer in answer.add("notifications", rawJSON: list) }
    }

    /// At most this many ids per /marknotificationsread (they fit the small sealed limit).
    static let maximumIDsPerMark = 25

    /// POST /marknotificationsread: `info` sealed {"pushToken", "ids": [id, ...]}.
    /// UpdateSuccess with how many were newly marked (`marked`); ids that are not this
    /// device's are ignored alike.
    static let markRead = DeviceAPI.sealedOperation(parameter: "info", use: .markRead) { operation, request, context in
        let info = try operation.object()
        guard case .array(let members)? = info["ids"], !members.isEmpty, members.count <= maximumIDsPerMark else {
            throw APIError.invalidRequest("The sealed 'info' must carry 'ids': 1 to \(maximumIDsPerMark) notification ids.")
        }
        let ids = try members.map { member throws(APIError) -> String in
            guard let id = member.stringValue, id.utf8.count == 32, Hex.decode(id) != nil else { throw APIError.sealedParameterRejected }
            return id.lowercased()
        }
        guard let device = try provenDevice(info, operation: operation, context: context) else { return .ok(.updateFail) }
        let marked = try context.notificationLog
            .markRead(notificationIDs: ids, deviceID: device.id, now: .now())
        return .json(.updateSuccess) { answer in answer.add("marked", marked) }
    }
}
