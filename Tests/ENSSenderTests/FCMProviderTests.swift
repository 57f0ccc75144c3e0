import ENSTestSupport
import Codecs
import Foundation
import Testing
@testable import ENSModel
@testable import SenderWire
@testable import ENSSender
import OpenSSL
@testable import ENSVault

/// The FCM implementation of the push-provider seam: device tokens of both kinds, the
/// service-account key file, the OAuth assertion (checked by Python's `cryptography`),
/// the message Google documents for ENS's payloads, and Google's error table.
@Suite struct FCMProviderTests {
    static let fcmToken = "cA1b2C3d4E5f6:APA91bHx_example-token_0123456789abcdefABCDEF"

    /// A service-account key file as Google issues it, with a key from the openssl CLI.
    static let accountJSON: (json: [UInt8], pem: String) = {
        let pem = try! Shell.run("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null")
        let object: [String: String] = [
            "type": "service_account", "project_id": "ens-test-project", "private_key_id": "0123456789abcdef0123456789abcdef01234567",
            "private_key": pem + "\n", "client_email": "ens-sender@ens-test-project.iam.gserviceaccount.com",
            "client_id": "123456789012345678901", "token_uri": "https://oauth2.example.test/token",
        ]
        return (Array(try! JSONSerialization.data(withJSONObject: object)), pem)
    }()

    static func notification(_ pushType: PushNotification.PushType = .alert, payload: String) throws -> PushNotification {
        PushNotification(id: "0123456789abcdef0123456789abcdef", deviceToken: try #require(DeviceToken(fcm: fcmToken)),
                         topic: "com.example.mail", environment: .production, pushType: pushType, expiration: 1_900_000_600,
                         payload: Array(payload.utf8), deviceRowID: 7)
    }

    // MARK: Device tokens

    @Test func tokensSayWhichServiceTheyBelongTo() throws {
        let apns = try #require(DeviceToken(sent: "A1B2C3D4E5F60718293A4B5C6D7E8F90"))
        #expect(apns.provider == .apns && apns.value == "a1b2c3d4e5f60718293a4b5c6d7e8f90" && apns.storedForm == apns.value)
        let fcm = try #require(DeviceToken(sent: "fcm:" + Self.fcmToken))
        #expect(fcm.provider == .fcm && fcm.value == Self.fcmToken && fcm.storedForm == "fcm:" + Self.fcmToken)
        #expect(DeviceToken(storedForm: fcm.storedForm) == fcm && DeviceToken(storedForm: apns.storedForm) == apns)
        // An FCM token without its prefix is not taken for an APNs token, nor the reverse.
        #expect(DeviceToken(sent: Self.fcmToken) == nil)
        for bad in ["fcm:", "fcm:short", "fcm:" + Self.fcmToken + " ", "fcm:a/b" + Self.fcmToken, "fcm:" + String(repeating: "a", count: 4097)] {
            #expect(DeviceToken(sent: bad) == nil, "\(bad.prefix(30))")
        }
    }

    @Test func theVaultKeepsAPNsHashesAndSeparatesFCMTokens() throws {
        let masterKey = try AESGCMKey(bytes: [UInt8](repeating: 7, count: 32))
        let vault = Vault(masterKey: masterKey)
        let hexLooking = String(repeating: "ab", count: 16)
        let apns = try #require(DeviceToken(hex: hexLooking))
        let fcm = try #require(DeviceToken(fcm: hexLooking))
        // An APNs token hashes as it always did (its hex), so stored rows still match.
        #expect(vault.tokenHash(apns) == Digest.hmacSHA256(key: masterKey.derivedBytes(label: "ens/v1/device-token-hash"),
                                                           message: Array(hexLooking.utf8)))
        #expect(vault.tokenHash(apns) != vault.tokenHash(fcm))
        #expect(try vault.openToken(try vault.sealToken(fcm)) == fcm)
        #expect(try vault.openToken(try vault.sealToken(apns)) == apns)
    }

    @Test func notificationsOfBothKindsSurviveTheSpoolForm() throws {
        let notification = try Self.notification(payload: #"{"aps":{"alert":"hi"}}"#)
        let parsed = try PushNotification(json: notification.json)
        #expect(parsed == notification)
        var wrongKind = notification.json
        wrongKind = Array(String(decoding: wrongKind, as: UTF8.self).replacingOccurrences(of: "\"provider\":\"fcm\"",
                                                                                          with: "\"provider\":\"apns\"").utf8)
        #expect(throws: PushNotification.Invalid.self) { try PushNotification(json: wrongKind) }
    }

    // MARK: Service account and assertion

    @Test func theServiceAccountFileIsReadAndItsFaultsNamed() throws {
        let account = try FCMServiceAccount(json: Self.accountJSON.json)
        #expect(account.projectID == "ens-test-project" && account.tokenURI == "https://oauth2.example.test/token")
        var object = try #require(try JSONSerialization.jsonObject(with: Data(Self.accountJSON.json)) as? [String: String])
        for (field, value, problem) in [("type", "authorized_user", "'type'"), ("token_uri", "http://x.test/token", "'token_uri'"),
                                        ("private_key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "'private_key'"),
                                        ("project_id", "Bad Project", "'project_id'")] {
            var broken = object
            broken[field] = value
            let error = #expect(throws: FCMServiceAccount.Invalid.self) {
                try FCMServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: broken)))
            }
            #expect(error?.problem.contains(problem) == true)
            #expect(error?.problem.contains("BEGIN") == false)
        }
        object["client_email"] = nil
        #expect(throws: FCMServiceAccount.Invalid.self) { try FCMServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: object))) }
        #expect(throws: FCMServiceAccount.Invalid.self) { try FCMServiceAccount(json: Array("[]".utf8)) }
    }

    @Test func theAssertionIsWhatGooglesTokenEndpointChecks() throws {
        let account = try FCMServiceAccount(json: Self.accountJSON.json)
        let assertion = try account.assertion(now: 1_800_000_000)
        // Verified independently: Python's cryptography with the key's public half.
        let verdict = try Shell.python("""
            import base64, json, sys
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import padding
            def b64(part): return base64.urlsafe_b64decode(part + '=' * (-len(part) % 4))
            header, claims, signature = sys.argv[1].split('.')
            key = serialization.load_pem_private_key(sys.argv[2].encode(), None).public_key()
            key.verify(b64(signature), (header + '.' + claims).encode(), padding.PKCS1v15(), hashes.SHA256())
            print(json.dumps([json.loads(b64(header)), json.loads(b64(claims))], sort_keys=True))
            """, [assertion, Self.accountJSON.pem])
        let parts = try #require(try JSONSerialization.jsonObject(with: Data(verdict.utf8)) as? [[String: Any]])
        #expect(parts[0]["alg"] as? String == "RS256" && parts[0]["kid"] as? String == account.privateKeyID && parts[0]["typ"] as? String == "JWT")
        #expect(parts[1]["iss"] as? String == account.clientEmail && parts[1]["aud"] as? String == account.tokenURI)
        #expect(parts[1]["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging")
        #expect(parts[1]["iat"] as? Int == 1_800_000_000 && parts[1]["exp"] as? Int == 1_800_003_600)
    }

    // MARK: Messages

    static func message(_ notification: PushNotification, now: Int64 = 1_900_000_000_000) throws -> [String: Any] {
        let body = try FCMProvider.message(for: notification, nowMilliseconds: now)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(object.keys.sorted() == ["message"])
        return try #require(object["message"] as? [String: Any])
    }

    @Test func aNewMailAlertIsAHighPriorityMessageWithStringData() throws {
        let payload = MailPayload(sender: "Alice", subject: "Lunch?", userID: "ab12", badge: 3, sound: "chime",
                                  syncKey: ("sync-1", Timestamp(millisecondsSinceEpoch: 1_900_000_000_000))).encoded
        let message = try Self.message(try Self.notification(payload: String(decoding: payload, as: UTF8.self)))
        #expect(message["token"] as? String == Self.fcmToken)
        #expect(message["topic"] == nil && message["condition"] == nil)
        let android = try #require(message["android"] as? [String: Any])
        #expect(android["priority"] as? String == "HIGH" && android["ttl"] as? String == "600s")
        #expect(android["collapse_key"] as? String == "0123456789abcdef0123456789abcdef")
        let shown = try #require(message["notification"] as? [String: String])
        #expect(shown == ["title": "Alice", "body": "Lunch?"])
        let data = try #require(message["data"] as? [String: Any])
        #expect(data.values.allSatisfy { $0 is String })
        #expect(data["badge"] as? String == "3" && data["sound"] as? String == "chime" && data["userid"] as? String == "ab12")
        #expect(data["backgroundSyncKey"] as? String == "sync-1" && data["notificationId"] as? String == "0123456789abcdef0123456789abcdef")
    }

    @Test func aBackgroundPushIsANormalPriorityDataMessage() throws {
        let notification = try Self.notification(.background,
                                                 payload: #"{"aps":{"content-available":1},"ens":{"userid":"ab12","action":"resubscribe"}}"#)
        let message = try Self.message(notification, now: 1_900_001_000_000)
        #expect(message["notification"] == nil)
        let android = try #require(message["android"] as? [String: Any])
        #expect(android["priority"] as? String == "NORMAL" && android["ttl"] as? String == "0s")
        #expect((message["data"] as? [String: String])?["action"] == "resubscribe")
    }

    // MARK: Answers

    static func googleError(_ status: Int, _ code: String?, message: String = "msg") -> [UInt8] {
        let details = code.map { #","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#($0)"}]"# } ?? ""
        return Array(#"{"error":{"code":\#(status),"message":"\#(message)","status":"X"\#(details)}}"#.utf8)
    }

    @Test func googlesErrorTableMapsToDeliveryActions() throws {
        let provider = try FCMProvider(accounts: [:], url: "https://fcm.example.test", caBundlePath: nil)
        func action(_ status: Int?, _ code: String?, _ message: String = "msg") -> DeliveryAction {
            provider.verdict(for: PushAnswer(status: status, body: status == nil ? [] : Self.googleError(status ?? 0, code, message: message))).action
        }
        #expect(action(200, nil) == .delivered)
        #expect(action(404, "UNREGISTERED") == .disableToken(timestamp: nil))
        #expect(action(403, "SENDER_ID_MISMATCH") == .disableToken(timestamp: nil))
        #expect(action(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token") == .disableToken(timestamp: nil))
        #expect(action(400, "INVALID_ARGUMENT", "Invalid value at 'message.android.ttl'") == .drop(reason: "400 INVALID_ARGUMENT"))
        #expect(action(401, "THIRD_PARTY_AUTH_ERROR") == .refreshCredentialsAndRetry)
        #expect(action(401, nil) == .refreshCredentialsAndRetry)
        #expect(action(403, "PERMISSION_DENIED") == .credentialRefused(reason: "403 PERMISSION_DENIED"))
        for (status, code) in [(429, "QUOTA_EXCEEDED"), (503, "UNAVAILABLE"), (500, "INTERNAL")] {
            #expect(action(status, code) == .retry)
        }
        #expect(action(nil, nil) == .retry)
        // A 404 that is not UNREGISTERED (a wrong project) must not disable tokens.
        #expect(action(404, nil) == .drop(reason: "404 X"))
        let verdict = provider.verdict(for: PushAnswer(status: 429, body: Self.googleError(429, "QUOTA_EXCEEDED"), retryAfter: .seconds(7)))
        #expect(verdict.reason == "QUOTA_EXCEEDED" && verdict.retryAfter == .seconds(7))
        #expect(provider.verdict(for: PushAnswer(status: 500, body: Array("<html>oops</html>".utf8))).action == .retry)
        #expect(FCMProvider.reasonLabel("a label that grows") == "other")
        // An HTTP-date is read too: one already past asks for no wait.
        let now = Timestamp(millisecondsSinceEpoch: 1_792_567_560_000)  // two minutes before that date
        #expect(PushAnswer.retryAfter(" 12 ") == .seconds(12) && PushAnswer.retryAfter("Wed, 21 Oct 2026 07:28:00 GMT", now: now) == .seconds(120))
        #expect(PushAnswer.retryAfter("Wed, 21 Oct 2026 07:28:00 GMT", now: Timestamp(millisecondsSinceEpoch: 1_795_600_000_000)) == .zero)
        #expect(PushAnswer.retryAfter("99999999") == .seconds(86_400))
    }

    @Test func anAppWithoutAServiceAccountCannotBeSent() throws {
        let provider = try FCMProvider(accounts: [:], url: "https://fcm.example.test", caBundlePath: nil)
        #expect(throws: PushRequestError.self) { try provider.request(for: try Self.notification(payload: #"{"aps":{"alert":"hi"}}"#)) }
    }
}
