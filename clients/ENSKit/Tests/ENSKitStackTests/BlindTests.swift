import ENSKitCurl
import Foundation
import Testing
@testable import ENSKit

/// Graph's `blind` mode end to end through nginx, the device side being ENSKit alone:
/// a mailbox of the Graph simulator's tenant contoso.test, devices that register their
/// own certificates, mail the simulator encrypts to each (for real), and each device
/// opening its own push with its own key: over APNs and FCM, fetched when too big, and
/// across a certificate rotation with a notification still in flight.
@Suite(.serialized, .enabled(if: Stack.isUp, "needs the stack scripts/enskit-test.sh starts"))
struct BlindTests {
    static let contoso = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001"

    /// A new mailbox of contoso.test and a delegated Graph token for it.
    func mailbox() async throws -> (user: ENSUser, credentials: ENSCredentials) {
        let email = Stack.unique("b") + "@contoso.test"
        try await Stack.control(Stack.graph, "/users", ["tenant": Self.contoso, "mail": email, "displayName": "Blind User"])
        let issued = try await Stack.control(Stack.graph, "/user-token", ["mail": email, "lifetimeSeconds": 3600])
        return (ENSUser(email: email), .graph(accessToken: try #require(issued["access_token"] as? String)))
    }

    /// New mail in the Graph mailbox; answers once ENS answered Graph's notifications.
    @discardableResult
    func newMail(_ user: ENSUser, subject: String, from sender: String, deliver: Bool = true) async throws -> [String: Any] {
        try await Stack.control(Stack.graph, "/newmail", ["mail": user.email ?? "", "subject": subject, "fromName": sender,
                                                          "fromAddress": "sender@elsewhere.test", "wait": true, "deliver": deliver])
    }

    func blindPushes(to token: ENSPushToken) -> [[String: Any]] {
        Stack.apnsPayloads(to: token).filter { ($0["ens"] as? [String: Any])?["privacy"] as? String == "blind" }
    }

    /// Two devices of one mailbox, an iPhone (APNs) and an Android phone (FCM, a
    /// 3,072-bit key), each with its own key store: each push names its device's
    /// certificate, carries nothing in clear, and opens with that device's key only.
    @Test func twoDevicesEachOpenTheirOwnPush() async throws {
        let (user, credentials) = try await mailbox()
        let phone = try Stack.client(), android = try Stack.client()
        let phoneToken = try Stack.apnsToken(), androidToken = try Stack.fcmToken()
        let first = try await phone.register(ENSRegistration(user: user, token: phoneToken, credentials: credentials, privacy: .blind))
        #expect(first.outcome == .subscribed && first.privacy == .blind && first.pushTag != nil)
        try android.setBlindKey(try ENSBlindKey(bits: 3072), for: user)
        let second = try await android.register(ENSRegistration(user: user, token: androidToken, credentials: credentials, privacy: .blind))
        #expect(second.outcome == .updated && second.privacy == .blind)
        let phoneKey = try #require(try phone.blindKey(for: user)), androidKey = try #require(try android.blindKey(for: user))
        #expect(androidKey.bits == 3072 && phoneKey.certificateID != androidKey.certificateID)

        let subject = "Blind lunch \(UUID().uuidString.prefix(8))"
        let sender = "Carol Secret \(UUID().uuidString.prefix(8))"
        try await newMail(user, subject: subject, from: sender)
        #expect(await Stack.eventually { !blindPushes(to: phoneToken).isEmpty && !Stack.fcmData(to: androidToken).isEmpty })

        let payload = try #require(blindPushes(to: phoneToken).last)
        let text = String(decoding: try JSONSerialization.data(withJSONObject: payload), as: UTF8.self)
        #expect(!text.contains(subject) && !text.contains(sender) && !text.contains(user.userID))
        let push = try ENSPush(userInfo: payload)
        #expect(push.mode == .blind && push.tag == first.pushTag && push.userID == nil)
        #expect(push.blind?.encryptionCertificateID == phoneKey.certificateID
            && push.blind?.encryptionCertificateThumbprint == phoneKey.certificateThumbprint)
        let opened = try #require(await push.blindMessage(using: phone))
        #expect(opened.subject == subject && opened.senderName == sender && opened.id?.isEmpty == false)
        #expect(await push.content(using: phone) == ENSNotificationContent(sender: sender, subject: subject))
        // The Android phone's key does not open the iPhone's push.
        #expect(throws: ENSPushError.doesNotOpen) { try push.blindMessage(with: try android.blindKeys(for: user)) }

        let data = try #require(Stack.fcmData(to: androidToken).last)
        #expect(data["privacy"] == "blind" && data["blind"] != nil && !(data["blind"] ?? "").contains(subject))
        let androidPush = try ENSPush(userInfo: data)
        #expect(androidPush.blind?.encryptionCertificateID == androidKey.certificateID)
        #expect(await androidPush.content(using: android) == ENSNotificationContent(sender: sender, subject: subject))
        #expect(throws: ENSPushError.doesNotOpen) { try androidPush.blindMessage(with: [phoneKey]) }
    }

    /// A push that would pass 4 KB comes without `ens.blind`; ENSKit fetches the
    /// ciphertext once and opens it.
    @Test func aPushTooBigIsFetchedAndOpened() async throws {
        let (user, credentials) = try await mailbox()
        let client = try Stack.client()
        let token = try Stack.apnsToken()
        #expect(try await client.register(ENSRegistration(user: user, token: token, credentials: credentials, privacy: .blind)).privacy == .blind)
        let subject = "Long blind subject " + String(repeating: "x", count: 3200)
        try await newMail(user, subject: subject, from: "Dana Long")
        #expect(await Stack.eventually { !blindPushes(to: token).isEmpty })
        let push = try ENSPush(userInfo: try #require(blindPushes(to: token).last))
        #expect(push.blind == nil, "over 4 KB: the push names the notification only")
        #expect(await push.content(using: client) == ENSNotificationContent(sender: "Dana Long", subject: subject))
        #expect(await push.content(using: client) == nil, "fetched once")
    }

    /// A rotation mid-stream: a notification Graph encrypted to the old certificate is
    /// delivered after the rotation and opens with the kept old key; the next opens
    /// with the new one.
    @Test func aRotationMidStreamLosesNothing() async throws {
        let (user, credentials) = try await mailbox()
        let client = try Stack.client()
        let token = try Stack.apnsToken()
        _ = try await client.register(ENSRegistration(user: user, token: token, credentials: credentials, privacy: .blind))
        let old = try #require(try client.blindKey(for: user))

        // Made by Graph before the rotation, held, delivered after it.
        let held = try await newMail(user, subject: "In flight during the rotation", from: "Erin Early", deliver: false)
        let inFlight = (held["notifications"] as? [[String: Any]] ?? []).filter { ($0["body"] as? String)?.contains("encryptedContent") == true }
        try #require(inFlight.count == 1, "\(held)")

        let new = try await client.rotateBlindCertificate(user: user, token: token)
        #expect(new.certificateID != old.certificateID)
        #expect(try client.blindKeys(for: user) == [new, old])

        for notification in inFlight {
            let url = try #require(notification["url"] as? String)
            let path = String(url[try #require(url.range(of: "/graph/")).lowerBound...])
            let request = ENSHTTPRequest(method: "POST", url: try #require(URL(string: "https://localhost:\(Stack.port)\(path)")),
                                         headers: ["Content-Type": "application/json"],
                                         body: Data(try #require(notification["body"] as? String).utf8))
            #expect(try await Stack.transport.send(request).status == 202)
        }
        try await newMail(user, subject: "After the rotation", from: "Finn Later")
        #expect(await Stack.eventually { blindPushes(to: token).count >= 2 })

        var opened: [String: String] = [:]
        for payload in blindPushes(to: token) {
            let push = try ENSPush(userInfo: payload)
            let content = try #require(await push.content(using: client))
            opened[content.subject] = push.blind?.encryptionCertificateID
        }
        #expect(opened == ["In flight during the rotation": old.certificateID, "After the rotation": new.certificateID])
    }

    /// ENS's worded 400s, through ENSKit's types: an expiring certificate, and `blind`
    /// for a mailbox that is not Exchange Online.
    @Test func refusalsAreTyped() async throws {
        let (user, credentials) = try await mailbox()
        let client = try Stack.client()
        let token = try Stack.apnsToken()
        _ = try await client.register(ENSRegistration(user: user, token: token, credentials: credentials, privacy: .blind))
        let expiring = try ENSBlindKey(bits: 2048, validity: .seconds(2 * 86_400), now: Date().addingTimeInterval(-1.5 * 86_400))
        await #expect(throws: ENSError.blindRefused(.expiring, message: "Parameter 'privacyCertificate' has expired or expires within a day.")) {
            try await client.updatePrivacy(user: user, token: token, mode: .blind, blindKey: expiring)
        }

        let (exchangeUser, password) = try await Stack.passwordMailbox()
        let other = try Stack.client()
        await #expect(throws: ENSError.blindRefused(.notExchangeOnline,
                                                     message: "Privacy 'blind' is for Exchange Online mailboxes (registered with " +
                                                              "graphAccessToken).")) {
            try await other.register(ENSRegistration(user: exchangeUser, token: try Stack.apnsToken(), credentials: password, privacy: .blind))
        }
    }
}
