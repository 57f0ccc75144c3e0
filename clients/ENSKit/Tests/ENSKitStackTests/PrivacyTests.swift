import ENSKitCurl
import Foundation
import Testing
@testable import ENSKit

/// Every privacy mode end to end: four devices of one user (generic, encrypted, secure
/// over APNs, encrypted over FCM), each with its own key store as a phone has; one mail;
/// no push carries the mail in clear, and each device shows it as its mode allows.
@Suite(.serialized, .enabled(if: Stack.isUp, "needs the stack scripts/enskit-test.sh starts"))
struct PrivacyTests {
    @Test func everyModeEndToEnd() async throws {
        let (user, credentials) = try await Stack.passwordMailbox()
        let generic = try Stack.client(), encrypted = try Stack.client(), secure = try Stack.client(), android = try Stack.client()
        let genericToken = try Stack.apnsToken(), encryptedToken = try Stack.apnsToken(), secureToken = try Stack.apnsToken()
        let androidToken = try Stack.fcmToken()

        let first = try await generic.register(ENSRegistration(user: user, token: genericToken, credentials: credentials))
        #expect(first.outcome == .subscribed)
        #expect(try await generic.updatePrivacy(user: user, token: genericToken, mode: .generic) == .generic)
        let sealed = try await encrypted.register(ENSRegistration(user: user, token: encryptedToken, credentials: credentials, privacy: .encrypted))
        #expect(sealed.outcome == .updated && sealed.privacy == .encrypted)
        #expect(try await secure.register(ENSRegistration(user: user, token: secureToken, credentials: credentials,
                                                          privacy: .secure)).privacy == .secure)
        #expect(try await android.register(ENSRegistration(user: user, token: androidToken, credentials: credentials,
                                                           privacy: .encrypted)).privacy == .encrypted)
        try await encrypted.updateSyncKey(user: user, token: encryptedToken, key: "kek-private", expiration: Date().addingTimeInterval(86_400))

        let subject = "Private subject \(UUID().uuidString.prefix(8))"
        let sender = "Private Sender \(UUID().uuidString.prefix(8))"
        try await Stack.newMail(user, subject: subject, from: sender)
        #expect(await Stack.eventually {
            [genericToken, encryptedToken, secureToken].allSatisfy { !Stack.apnsPayloads(to: $0).isEmpty } && !Stack.fcmData(to: androidToken).isEmpty
        })
        for token in [genericToken, encryptedToken, secureToken] {
            let text = String(decoding: try JSONSerialization.data(withJSONObject: try #require(Stack.apnsPayloads(to: token).last)), as: UTF8.self)
            #expect(!text.contains(subject) && !text.contains(sender) && !text.contains("kek-private"))
        }

        let genericPush = try ENSPush(userInfo: try #require(Stack.apnsPayloads(to: genericToken).last))
        #expect(genericPush.mode == .generic && genericPush.tag == first.pushTag && genericPush.userID == nil)
        #expect(await genericPush.content(using: generic) == nil)

        let encryptedPush = try ENSPush(userInfo: try #require(Stack.apnsPayloads(to: encryptedToken).last))
        #expect(encryptedPush.mode == .encrypted && encryptedPush.user(using: encrypted) == ENSUser(userID: user.userID))
        let opened = await encryptedPush.content(using: encrypted)
        #expect(opened?.sender == sender && opened?.subject == subject && opened?.syncKey?.key == "kek-private")
        // Another device's key does not open it.
        #expect(await encryptedPush.content(using: android) == nil)

        let securePush = try ENSPush(userInfo: try #require(Stack.apnsPayloads(to: secureToken).last))
        #expect(securePush.mode == .secure && securePush.encryptedContent == nil)
        let fetched = await securePush.content(using: secure)
        #expect(fetched?.sender == sender && fetched?.subject == subject)
        #expect(await securePush.content(using: secure) == nil)  // once only

        let androidPush = try ENSPush(userInfo: try #require(Stack.fcmData(to: androidToken).last))
        #expect(androidPush.mode == .encrypted)
        #expect(await androidPush.content(using: android)?.subject == subject)

        // The history, proved by the device's own secret.
        let history = try await secure.getNotificationHistory(user: user, token: secureToken, limit: 5)
        let entry = try #require(history.first { $0.id == securePush.id })
        #expect(entry.subject == subject && !entry.isRead)
        #expect(try await secure.markNotificationsRead(user: user, token: secureToken, ids: [entry.id]) == 1)
        #expect(try await secure.getNotificationHistory(user: user, token: secureToken).first { $0.id == entry.id }?.isRead == true)
        // Another device's client has another secret: ENS answers as for an unknown device.
        await #expect(throws: ENSError.userNotFound) { try await generic.getNotificationHistory(user: user, token: secureToken) }
    }
}
