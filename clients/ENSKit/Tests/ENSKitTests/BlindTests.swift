import Crypto
import Foundation
import Testing
@testable import ENSKit

/// The blind mode on the device: its RSA keys and self-signed certificates (checked and
/// encrypted to by Python's `cryptography`, as Graph does), the key ring that keeps a
/// rotated key, the requests that carry the certificate, ENS's worded 400s, and pushes
/// opened with the key their certificate id names, carried or fetched.
struct BlindTests {
    let user = ENSUser(email: "Someone@contoso.test")
    let apns = ENSPushToken.apns(String(repeating: "b2", count: 32))
    static let id = "0123456789abcdef0123456789abcdef"
    static let tag = "Ab3dEf6hIj9kLm0n"

    // MARK: Keys and certificates

    /// The vectors' certificates (made by Python's `cryptography`): ENSKit names them as
    /// ENS names them to Graph, so each content's `encryptionCertificateId` and
    /// thumbprint are the key's; a ring of both keys opens each content with its own.
    @Test func vectorKeysAreNamedAsENSNamesThem() throws {
        let vectors = try Vectors.json("blind")
        let device = try ENSBlindKey(pemRepresentation: try #require(vectors["device_private_key_pem"] as? String),
                                     certificateDER: try #require(Data(base64Encoded: try #require(vectors["device_certificate"] as? String))))
        let rotated = try ENSBlindKey(pemRepresentation: try #require(vectors["rotated_private_key_pem"] as? String),
                                      certificateDER: try #require(Data(base64Encoded: try #require(vectors["rotated_certificate"] as? String))))
        let good = try #require(BlindContent.fromPush(vectors["good"].map(PushValue.init)) ?? nil)
        let after = try #require(BlindContent.fromPush(vectors["rotated"].map(PushValue.init)) ?? nil)
        #expect(good.encryptionCertificateID == device.certificateID && good.encryptionCertificateThumbprint == device.certificateThumbprint)
        #expect(after.encryptionCertificateID == rotated.certificateID && after.encryptionCertificateThumbprint == rotated.certificateThumbprint)
        #expect(device.bits == 2048 && rotated.bits == 3072)
        #expect(device.certificateSHA256.hasPrefix(device.certificateID) && device.certificateSHA256.count == 64)

        let ring = [rotated, device]
        let first = try good.message(with: ring)
        #expect(first.id == "AAMkAGI2TG93AAA=" && first.senderName == "Bea Finance" && first.senderAddress == "bea@contoso.test")
        #expect(first.receivedDateTime == "2026-11-27T10:15:00Z" && String(decoding: first.resource, as: UTF8.self) == vectors["resource"] as? String)
        let second = try after.message(with: ring)
        #expect(second.id == "AAMkAGI2TG94AAA=" && second.content == ENSNotificationContent(sender: "carol@contoso.test",
                                                                                            subject: "After the rotation"))
        #expect(throws: BlindContent.Failure.noKey) { try after.message(with: [device]) }
        // Named by the right id but altered, or wrapped to another key: refused.
        var altered = try #require(BlindContent.fromPush(vectors["altered_data"].map(PushValue.init)) ?? nil)
        #expect(throws: BlindContent.Failure.signatureMismatch) { try altered.message(with: ring) }
        altered = try #require(BlindContent.fromPush(vectors["other_key"].map(PushValue.init)) ?? nil)
        #expect(throws: BlindContent.Failure.noKey) { try altered.message(with: ring) }
        altered.encryptionCertificateID = device.certificateID
        #expect(throws: BlindContent.Failure.keyDoesNotUnwrap) { try altered.message(with: ring) }

        // A certificate that is not the key's is refused.
        #expect(throws: ENSError.invalidArgument("the certificate is not the key's")) {
            try ENSBlindKey(derRepresentation: device.derRepresentation, certificateDER: rotated.certificateDER)
        }
        #expect(throws: ENSError.self) { try ENSBlindKey(derRepresentation: device.derRepresentation, certificateDER: Data("junk".utf8)) }
    }

    /// A key and certificate ENSKit makes, read by Python's `cryptography` as ENS and
    /// Graph read it (X.509, RSA of the size asked, self-signed, valid now for two
    /// years), which then encrypts to it as Graph does; ENSKit opens that.
    @Test(.enabled(if: Python.hasCryptography, "needs python3 with cryptography"), arguments: [2048, 3072])
    func pythonEncryptsToACertificateENSKitMade(bits: Int) throws {
        let key = try ENSBlindKey(bits: bits)
        let resource = #"{"id":"AAMkAD=","subject":"Quarterly numbers — déjà vu","from":{"emailAddress":{"name":"Bea Finance","# +
                       #""address":"bea@contoso.test"}}}"#
        let output = try Python.runFile(Python.repositoryRoot + "/clients/ENSKit/Tests/ENSKitTests/Vectors/graph_encrypt.py",
                                        [key.certificateBase64, resource])
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
        let certificate = try #require(answer["certificate"] as? [String: Any])
        #expect(certificate["bits"] as? Int == bits && certificate["selfSigned"] as? Bool == true)
        let now = Date().timeIntervalSince1970
        let notBefore = try #require((certificate["notBefore"] as? NSNumber)?.doubleValue)
        let notAfter = try #require((certificate["notAfter"] as? NSNumber)?.doubleValue)
        #expect(notBefore <= now && notBefore > now - 600)
        #expect(abs(notAfter - (now + TimeInterval(ENSBlindKey.defaultValidity.components.seconds))) < 600)
        #expect(abs(key.notValidAfter.timeIntervalSince1970 - notAfter) < 1)
        let content = try #require(BlindContent.fromPush(answer["encryptedContent"].map(PushValue.init)) ?? nil)
        #expect(content.encryptionCertificateID == key.certificateID && content.encryptionCertificateThumbprint == key.certificateThumbprint)
        let message = try content.message(with: [try ENSBlindKey(bits: 2048), key])
        #expect(message.subject == "Quarterly numbers — déjà vu" && message.senderName == "Bea Finance" && message.id == "AAMkAD=")
        // The key survives its stored form.
        let stored = try ENSBlindKey(derRepresentation: key.derRepresentation, certificateDER: key.certificateDER)
        #expect(stored == key && stored.certificateID == key.certificateID)
    }

    @Test func onlyKeysGraphTakes() {
        #expect(throws: ENSError.self) { try ENSBlindKey(bits: 1024) }
        #expect(throws: ENSError.self) { try ENSBlindKey(bits: 2048, validity: .seconds(3600)) }
    }

    /// The ring keeps a retired key for three days (past the subscription's renewal,
    /// about 12 hours), eight at most; an item of ENSKit before certificates (a bare
    /// DER key) still reads.
    @Test func theKeyRingKeepsRetiredKeysForAWhile() throws {
        let vectors = try Vectors.json("blind")
        let device = try ENSBlindKey(pemRepresentation: try #require(vectors["device_private_key_pem"] as? String),
                                     certificateDER: try #require(Data(base64Encoded: try #require(vectors["device_certificate"] as? String))))
        let rotated = try ENSBlindKey(pemRepresentation: try #require(vectors["rotated_private_key_pem"] as? String),
                                      certificateDER: try #require(Data(base64Encoded: try #require(vectors["rotated_certificate"] as? String))))
        var ring = ENSBlindKeyRing(current: device)
        ring.install(rotated, now: testTime)
        #expect(ring.current == rotated && ring.all == [rotated, device])
        let read = try ENSBlindKeyRing(data: try ring.data())
        #expect(read.all == [rotated, device] && read.previous.first?.retiredAt.timeIntervalSince(testTime).magnitude ?? 1 < 0.001)
        #expect(read.key(certificateID: device.certificateID.uppercased()) == device)
        ring.install(device, now: testTime)   // back again: no duplicate
        #expect(ring.all == [device, rotated])
        ring.prune(now: testTime.addingTimeInterval(ENSBlindKeyRing.retention - 60))
        #expect(ring.all.count == 2)
        ring.prune(now: testTime.addingTimeInterval(ENSBlindKeyRing.retention + 60))
        #expect(ring.all == [device])

        let store = MemoryKeyStore()
        let client = try makeClient(RecordedTransport([]), keyStore: store)
        try store.set(device.derRepresentation, for: .blindKey(client.namespace, user.userID))
        let legacy = try #require(try client.blindKey(for: user))
        #expect(legacy.derRepresentation == device.derRepresentation)
        #expect(try client.blindKey(for: user) == legacy, "the certificate made for an old item is kept")
        try client.setBlindKey(rotated, for: user)
        #expect(try client.blindKeys(for: user).count == 2 && client.blindKey(for: user, certificateID: rotated.certificateID) == rotated)
        try client.setBlindKey(nil, for: user)
        #expect(try client.blindKeys(for: user).isEmpty)
    }

    // MARK: Requests

    /// A blind registration sends the certificate in clear (never sealed); a rotation
    /// names the new certificate by its SHA-256 inside the sealed info and keeps the old
    /// key.
    @Test func registrationAndRotationCarryTheCertificate() async throws {
        let (pem, serverKey) = try Vectors.serverKey()
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem),
                                          #"{"responseCode":"UserUpdated","pushTag":"Ab3dEf6hIj9kLm0n","privacy":"blind"}"#,
                                          #"{"responseCode":"UpdateSuccess","privacy":"blind"}"#,
                                          #"{"responseCode":"UpdateSuccess","privacy":"blind"}"#)
        let store = MemoryKeyStore()
        let client = try makeClient(transport, keyStore: store)
        let result = try await runAsync {
            try await client.register(ENSRegistration(user: user, token: apns, credentials: .graph(accessToken: "eyJ0"), privacy: .blind))
        }
        #expect(result.privacy == .blind && result.outcome == .updated)
        let first = try #require(try client.blindKey(for: user))
        let parameters = try transport.parameters(1)
        #expect(parameters["privacy"] == nil && parameters["privacyCertificate"] as? String == first.certificateBase64)
        #expect(parameters["privacyKey"] == nil)
        let creds = try unseal(try #require(parameters["creds"] as? String), with: serverKey)
        #expect(creds["graphAccessToken"] as? String == "eyJ0" && creds["privacyCertificate"] == nil)
        #expect(creds["privacy"] as? String == "blind" && creds["privacyCertificateSHA256"] as? String == first.certificateSHA256)

        // updatePrivacy(.blind) with a key: the same certificate, named by its hash.
        #expect(try await client.updatePrivacy(user: user, token: apns, mode: .blind) == .blind)
        let same = try transport.parameters(2)
        #expect(same["privacyCertificate"] as? String == first.certificateBase64)
        let sameInfo = try unseal(try #require(same["info"] as? String), with: serverKey)
        #expect(sameInfo["privacy"] as? String == "blind" && sameInfo["privacyCertificateSHA256"] as? String == first.certificateSHA256)
        #expect(first.certificateSHA256 == Hex.encode(Array(SHA256.hash(data: first.certificateDER))))

        let second = try await client.rotateBlindCertificate(user: user, token: apns)
        #expect(second.certificateID != first.certificateID)
        let rotation = try transport.parameters(3)
        #expect(rotation["privacyCertificate"] as? String == second.certificateBase64)
        let info = try unseal(try #require(rotation["info"] as? String), with: serverKey)
        #expect(info["privacyCertificateSHA256"] as? String == second.certificateSHA256 && info["purpose"] as? String == "updateprivacy.info")
        #expect(try client.blindKey(for: user) == second)
        #expect(try client.blindKeys(for: user) == [second, first])
        #expect(transport.requests.count == 4)
    }

    /// The 400s that say what is wrong with the certificate are typed (and are not
    /// taken for a stale key); Graph refusing it is an ExchangeError; a refused rotation
    /// leaves the current key as it was and forgets the new one.
    @Test func refusalsAreTypedAndARefusedRotationChangesNothing() async throws {
        let (pem, _) = try Vectors.serverKey()
        let worded: [(String, ENSBlindRefusal)] = [
            ("Parameter 'privacyCertificate' has expired or expires within a day.", .expiring),
            ("Parameter 'privacyCertificate' has a 1024-bit key; Graph needs 2,048 to 4,096 bits.", .keySize),
            ("Parameter 'privacyCertificate' must hold an RSA key; Graph encrypts only to RSA.", .notRSA),
            ("Parameter 'privacyCertificate' must be an X.509 certificate: base64 of its DER form, or PEM.", .notX509),
            ("Parameter 'privacyCertificate' is not valid yet.", .notYetValid),
            ("Privacy 'blind' needs 'privacyCertificate', the X.509 certificate of the device's RSA key.", .missingCertificate),
            ("Privacy 'blind' is for Exchange Online mailboxes (registered with graphAccessToken).", .notExchangeOnline),
            ("The sealed 'info' must name 'privacyCertificate' by its SHA-256 ('privacyCertificateSHA256', hex).", .hashMismatch),
            ("This mailbox has blind certificates for 8 devices already: reuse one of them.", .tooManyCertificates),
            ("Something new.", .other),
        ]
        for (message, reason) in worded {
            let body = String(decoding: try JSONSerialization.data(withJSONObject: ["responseCode": "InvalidRequest", "message": message]),
                              as: UTF8.self)
            let transport = RecordedTransport([(200, [:], try publicKeyAnswer(user, pem)), (400, [:], body)])
            let client = try makeClient(transport)
            await #expect(throws: ENSError.blindRefused(reason, message: message)) {
                try await client.register(ENSRegistration(user: user, token: apns, credentials: .graph(accessToken: "t"), privacy: .blind))
            }
            #expect(transport.requests.count == 2, "a worded 400 is not a stale key: no refetch")
        }
        // Since openapi 2.10 the refusal is named by code; the code wins over the words
        // (a reworded message still reads right), and an unknown code falls back to them.
        let coded: [([String: String], ENSBlindRefusal)] = [
            (["refusal": "keySize", "message": "Any wording at all."], .keySize),
            (["refusal": "tooManyCertificates", "message": "Parameter 'privacyCertificate' is not valid yet."], .tooManyCertificates),
            (["refusal": "somethingNew", "message": "Parameter 'privacyCertificate' is not valid yet."], .notYetValid),
        ]
        for (members, reason) in coded {
            let body = String(decoding: try JSONSerialization.data(withJSONObject: members.merging(["responseCode": "InvalidRequest"]) { a, _ in a }),
                              as: UTF8.self)
            let transport = RecordedTransport([(200, [:], try publicKeyAnswer(user, pem)), (400, [:], body)])
            await #expect(throws: ENSError.blindRefused(reason, message: members["message"] ?? "")) {
                try await makeClient(transport).register(ENSRegistration(user: user, token: apns,
                                                                         credentials: .graph(accessToken: "t"), privacy: .blind))
            }
        }
        // The uniform 400 stays invalidRequest (after the one refetch of the key).
        let uniform = RecordedTransport([(200, [:], try publicKeyAnswer(user, pem)),
                                         (400, [:], #"{"responseCode":"InvalidRequest","message":"The request is invalid."}"#),
                                         (200, [:], try publicKeyAnswer(user, pem))])
        await #expect(throws: ENSError.invalidRequest) {
            try await makeClient(uniform).register(ENSRegistration(user: user, token: apns, credentials: .graph(accessToken: "t"), privacy: .blind))
        }

        let store = MemoryKeyStore()
        let transport = RecordedTransport([
            (200, [:], try publicKeyAnswer(user, pem)), (200, [:], #"{"responseCode":"UserUpdated","pushTag":"Ab3dEf6hIj9kLm0n","privacy":"blind"}"#),
            (400, [:], #"{"responseCode":"InvalidRequest","# +
                       #""message":"The sealed 'info' must name 'privacyCertificate' by its SHA-256 ('privacyCertificateSHA256', hex)."}"#),
            (200, [:], #"{"responseCode":"ExchangeError","# +
                       #""message":"Graph could not create the encrypted subscription for this certificate; try again later."}"#),
            (200, [:], #"{"responseCode":"UpdateFail"}"#),
        ])
        let client = try makeClient(transport, keyStore: store)
        _ = try await client.register(ENSRegistration(user: user, token: apns, credentials: .graph(accessToken: "t"), privacy: .blind))
        let current = try #require(try client.blindKey(for: user))
        await #expect(throws: ENSError.blindRefused(.hashMismatch,
            message: "The sealed 'info' must name 'privacyCertificate' by its SHA-256 ('privacyCertificateSHA256', hex).")) {
            try await client.rotateBlindCertificate(user: user, token: apns)
        }
        await #expect(throws: ENSError.exchangeError(
            message: "Graph could not create the encrypted subscription for this certificate; try again later.")) {
            try await client.rotateBlindCertificate(user: user, token: apns)
        }
        await #expect(throws: ENSError.updateFailed) { try await client.rotateBlindCertificate(user: user, token: apns) }
        #expect(try client.blindKeys(for: user) == [current])
    }

    /// A transport failure during a rotation keeps the new key as a previous one: ENS
    /// may have taken it, and pushes encrypted to it must still open.
    @Test func aRotationWhoseAnswerIsLostKeepsTheNewKey() async throws {
        let (pem, _) = try Vectors.serverKey()
        let transport = RecordedTransport(json: try publicKeyAnswer(user, pem),
                                          #"{"responseCode":"UserUpdated","pushTag":"Ab3dEf6hIj9kLm0n","privacy":"blind"}"#)
        let client = try makeClient(transport)
        _ = try await client.register(ENSRegistration(user: user, token: apns, credentials: .graph(accessToken: "t"), privacy: .blind))
        let current = try #require(try client.blindKey(for: user))
        await #expect(throws: ENSError.self) { try await client.rotateBlindCertificate(user: user, token: apns) }
        let keys = try client.blindKeys(for: user)
        #expect(keys.count == 2 && keys.first == current)
    }

    // MARK: Pushes

    /// A device's state as ENSKit keeps it after a blind registration: the server key,
    /// the secret, the token and tag, and the blind keys.
    func makeDevice(_ transport: RecordedTransport, keys: [ENSBlindKey]) throws -> ENSClient {
        let (pem, _) = try Vectors.serverKey()
        let store = MemoryKeyStore()
        let client = try makeClient(transport, keyStore: store)
        let namespace = client.namespace
        try store.set(Data(pem.utf8), for: .serverKey(namespace, user.userID))
        try store.set(Data(Data(count: 32).base64EncodedString().utf8), for: .deviceSecret(namespace, user.userID))
        try store.set(Data(apns.wireForm.utf8), for: .registeredToken(namespace, user.userID))
        try store.set(Data(user.userID.utf8), for: .tagOwner(namespace, Self.tag))
        for key in keys.reversed() { try client.setBlindKey(key, for: user) }
        return client
    }

    func vectorKeys() throws -> (device: ENSBlindKey, rotated: ENSBlindKey, vectors: [String: Any]) {
        let vectors = try Vectors.json("blind")
        let device = try ENSBlindKey(pemRepresentation: try #require(vectors["device_private_key_pem"] as? String),
                                     certificateDER: try #require(Data(base64Encoded: try #require(vectors["device_certificate"] as? String))))
        let rotated = try ENSBlindKey(pemRepresentation: try #require(vectors["rotated_private_key_pem"] as? String),
                                      certificateDER: try #require(Data(base64Encoded: try #require(vectors["rotated_certificate"] as? String))))
        return (device, rotated, vectors)
    }

    /// docs/api.md's payloads: APNs `ens.blind` an object, FCM `data.blind` JSON text;
    /// each opened with the key its certificate id names, the current or a previous one.
    @Test func pushesOfBothServicesOpenWithTheNamedKey() async throws {
        let (device, rotated, vectors) = try vectorKeys()
        let client = try makeDevice(RecordedTransport([]), keys: [rotated, device])
        let good = try #require(vectors["good"] as? [String: Any])
        let apns = try ENSPush(userInfo: [
            "aps": ["alert": ["title": "New mail", "body": ""], "sound": "default", "content-available": 1, "mutable-content": 1],
            "ens": ["tag": Self.tag, "id": Self.id, "ts": 1_764_081_234_567, "privacy": "blind", "blind": good],
        ])
        #expect(apns.mode == .blind && apns.blind?.encryptionCertificateID == device.certificateID && apns.blind?.messageID == nil)
        #expect(await apns.content(using: client) == ENSNotificationContent(sender: "Bea Finance", subject: "Quarterly numbers — déjà vu"))
        #expect(await apns.blindMessage(using: client)?.id == "AAMkAGI2TG93AAA=")

        let text = String(decoding: try JSONSerialization.data(withJSONObject: try #require(vectors["rotated"] as? [String: Any])), as: UTF8.self)
        let fcm = try ENSPush(userInfo: ["notificationId": Self.id, "tag": Self.tag, "id": Self.id,
                                         "ts": "1764081234567", "privacy": "blind", "blind": text])
        #expect(await fcm.content(using: client)?.subject == "After the rotation")
        #expect(try fcm.blindMessage(with: [rotated]).id == "AAMkAGI2TG94AAA=")
        #expect(throws: ENSPushError.doesNotOpen) { try fcm.blindMessage(with: [device]) }

        // Another device (other keys) shows the generic alert; so does an altered push.
        let other = try makeDevice(RecordedTransport([]), keys: [try ENSBlindKey()])
        #expect(await apns.content(using: other) == nil)
        let altered = try ENSPush(userInfo: ["aps": ["mutable-content": 1],
                                             "ens": ["tag": Self.tag, "id": Self.id, "privacy": "blind",
                                                     "blind": try #require(vectors["altered_data"])]])
        #expect(await altered.content(using: client) == nil)
    }

    /// A push too big to carry `ens.blind` is fetched once (`/getnotification`, sealed
    /// with the device's secret) and opened as if it had come in the push.
    @Test func aPushWithoutTheCiphertextIsFetched() async throws {
        let (device, _, vectors) = try vectorKeys()
        let (_, serverKey) = try Vectors.serverKey()
        let content = try #require(vectors["good"] as? [String: Any])
        let found = String(decoding: try JSONSerialization.data(withJSONObject: ["id": Self.id, "content": content,
                                                                                 "responseCode": "NotificationFound"]),
                           as: UTF8.self)
        let transport = RecordedTransport(json: found, #"{"responseCode":"NotificationNotFound"}"#,
                                          #"{"id":"0123456789abcdef0123456789abcdef","content":{"sender":"x","subject":"y"},"# +
                                          #""responseCode":"NotificationFound"}"#)
        let client = try makeDevice(transport, keys: [device])
        let apns = try ENSPush(userInfo: ["aps": ["alert": ["title": "New mail", "body": ""], "mutable-content": 1],
                                          "ens": ["tag": Self.tag, "id": Self.id, "ts": 1_764_081_234_567, "privacy": "blind"]])
        #expect(apns.blind == nil)
        #expect(await apns.content(using: client)?.sender == "Bea Finance")
        #expect(transport.requests.map(\.url.path) == ["/getnotification"])
        let info = try unseal(try #require(try transport.parameters(0)["info"] as? String), with: serverKey)
        #expect(info["id"] as? String == Self.id && info["pushToken"] as? String == self.apns.value
            && info["purpose"] as? String == "getnotification.info")
        // Fetched once: then nothing to show.
        #expect(await apns.content(using: client) == nil)
        // Content that is not Graph's encryptedContent is refused.
        await #expect(throws: ENSError.malformedAnswer(status: 200, responseCode: "NotificationFound", "'content.data' is missing")) {
            try await client.getBlindNotification(user: user, token: self.apns, id: Self.id)
        }
    }
}
