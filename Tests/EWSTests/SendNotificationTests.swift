import ENSTestSupport
import Foundation
import Testing
import XML
@testable import EWS
@testable import MailBackends

/// SendNotification parsing against the shapes real servers send (docs/exchange.md).
@Suite struct SendNotificationTests {
    /// Exchange Online's form: soap11 prefix, XML declaration, t:/m: prefixes.
    static let exchangeOnline = Fixtures.exchangeOnlineSendNotification

    /// WorkMail's form: default namespaces instead of prefixes, and a heartbeat.
    static let defaultNamespaces = """
        <Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Body>
        <SendNotification xmlns="http://schemas.microsoft.com/exchange/services/2006/messages"><ResponseMessages>
        <SendNotificationResponseMessage ResponseClass="Success"><ResponseCode>NoError</ResponseCode>
        <Notification><SubscriptionId xmlns="http://schemas.microsoft.com/exchange/services/2006/types">sub-2</SubscriptionId>
        <MoreEvents xmlns="http://schemas.microsoft.com/exchange/services/2006/types">true</MoreEvents>
        <StatusEvent xmlns="http://schemas.microsoft.com/exchange/services/2006/types"><Watermark>wm-9</Watermark></StatusEvent>
        </Notification></SendNotificationResponseMessage></ResponseMessages></SendNotification></Body></Envelope>
        """

    @Test func readsNewMailEventsDedupedInOrder() throws {
        let message = try SendNotification(xml: Array(Self.exchangeOnline.utf8))
        #expect(message.errorCodes.isEmpty)
        let notification = try #require(message.notifications.first)
        #expect(notification.subscriptionID == "sub-1")
        #expect(notification.previousWatermark == "wm-0")
        #expect(notification.newItemIDs == ["item-1", "item-2"])
        #expect(notification.lastWatermark == "wm-3")
        #expect(!notification.heartbeat && !notification.moreEvents)
    }

    @Test func readsDefaultNamespaceHeartbeats() throws {
        let notification = try #require(try SendNotification(xml: Array(Self.defaultNamespaces.utf8)).notifications.first)
        #expect(notification.subscriptionID == "sub-2")
        #expect(notification.heartbeat && notification.moreEvents)
        #expect(notification.newItemIDs.isEmpty)
        #expect(notification.lastWatermark == "wm-9")
    }

    @Test func readsErrorResponseMessages() throws {
        let text = Self.exchangeOnline.replacingOccurrences(of: #"ResponseClass="Success">"#, with: #"ResponseClass="Error">"#)
            .replacingOccurrences(of: "<m:ResponseCode>NoError", with: "<m:ResponseCode>ErrorReadEventsFailed")
        let message = try SendNotification(xml: Array(text.utf8))
        #expect(message.errorCodes == ["ErrorReadEventsFailed"])
        #expect(message.failures.first?.subscriptionID != nil)
        #expect(message.notifications.isEmpty)
        // An error message that does not say which subscription it concerns.
        let anonymous = text.replacingOccurrences(of: #"<t:SubscriptionId>[^<]*</t:SubscriptionId>"#, with: "", options: .regularExpression)
        #expect(try SendNotification(xml: Array(anonymous.utf8)).failures.map(\.subscriptionID) == [nil])
    }

    @Test func refusesTheWrongNamespaces() {
        // The https:// variants printed on some Microsoft pages are not EWS.
        let https = Self.exchangeOnline.replacingOccurrences(of: "http://schemas.microsoft.com/exchange/services/2006/messages",
                                                             with: "https://schemas.microsoft.com/exchange/services/2006/messages")
        #expect(throws: SendNotification.Invalid.self) { try SendNotification(xml: Array(https.utf8)) }
        let soap12 = Self.exchangeOnline.replacingOccurrences(of: "http://schemas.xmlsoap.org/soap/envelope/",
                                                              with: "http://www.w3.org/2003/05/soap-envelope")
        #expect(throws: SendNotification.Invalid.self) { try SendNotification(xml: Array(soap12.utf8)) }
    }

    @Test func refusesTruncatedMessages() {
        let bytes = Array(Self.exchangeOnline.utf8)
        for cut in stride(from: 0, to: bytes.count - 20, by: 37) {
            #expect(throws: SendNotification.Invalid.self) { try SendNotification(xml: Array(bytes[..<cut])) }
        }
    }

    @Test func refusesNotificationsWithoutSubscriptionId() {
        let text = Self.exchangeOnline.replacingOccurrences(of: "<t:SubscriptionId>sub-1</t:SubscriptionId>", with: "")
        #expect(throws: SendNotification.Invalid.self) { try SendNotification(xml: Array(text.utf8)) }
    }

    @Test func resultCarriesTheStatusInTheMessagesNamespace() throws {
        for unsubscribe in [false, true] {
            let envelope = try XMLTree.parse(SOAP.sendNotificationResult(unsubscribe: unsubscribe))
            let status = envelope.path(Namespace.soap, "Body")?.path(Namespace.messages, "SendNotificationResult", "SubscriptionStatus")
            #expect(status?.trimmedText == (unsubscribe ? "Unsubscribe" : "OK"))
        }
    }
}
