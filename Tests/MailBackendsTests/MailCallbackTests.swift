import Codecs
import ENSConfig
import ENSHTTP
import ENSModel
import ENSStore
import ENSTestSupport
import ENSVault
import MariaDB
import SenderWire
import Testing
@testable import MailBackends

extension OnAThrowawayDatabase {
    /// MailCallback and NewMailDelivery in process, against a throwaway MariaDB with ENS's
    /// schema and a stand-in sender on a Unix socket: what a callback for a record that is
    /// gone, superseded or still registering is answered; a heartbeat left to the
    /// liveness batch; new mail logged and handed on one notification per device and
    /// message, the same ids on a redelivery, 503 when the sender does not take it; and the
    /// per-callback and per-minute caps.
    @Suite struct MailCallbackTests {
        let database = ThrowawayENSDatabase.shared

        func withSender(_ body: (StandInSender) throws -> Void) throws {
            try withTemporaryDirectory { directory in
                let sender = try StandInSender(directory: directory)
                defer { sender.stop() }
                try body(sender)
            }
        }

        /// The record's row as a callback left it.
        func row(_ id: Int64, _ connection: Connection) throws -> (heardAt: Timestamp?, watermark: String?, notifyCount: Int64, registered: Bool) {
            let row = try #require(try connection.queryOne("""
                SELECT last_callback_at, watermark, notify_count, registered FROM EnsSubscriptionInfo WHERE id = \(id)
                """))
            return try row.decode(Timestamp?.self, String?.self, Int64.self, Bool.self)
        }

        /// The ids NotificationLog holds for `devices`, as lowercase hex.
        func logged(_ devices: [Int64], _ connection: Connection) throws -> [String] {
            try connection.query("""
                SELECT LOWER(HEX(id))
                FROM NotificationLog
                WHERE device_id IN (\(list: devices))
                ORDER BY 1
                """).map { try $0.decode(String.self) }
        }

        static func heartbeat(_ subscription: String) -> MailEvents {
            MailEvents(subscriptionIDs: [subscription], newItemIDs: [], heartbeat: true, watermark: "w-beat")
        }

        // MARK: Which callbacks end their subscription

        @Test func aCallbackForARecordThatIsGoneIsAnsweredUnsubscribe() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            try SubscriptionStore(database: connection, vault: database.vault).deleteRecord(id: record.id)
            let context = responderContext(database, sender: nil)
            let source = ScriptedSource(MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: ["item-1"]))
            #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .unsubscribe)
            #expect(try ScriptedSource(Self.heartbeat(record.subscriptionID)).callback(record: record.id,
                                                                                       generation: record.generation, context: context)
                == .unsubscribe)
            #expect(source.mailbox.asked.isEmpty, "nothing is looked up for a record that is gone")
        }

        @Test func aSupersededGenerationIsAnsweredUnsubscribeAndTheLiveOneIsNot() throws {
            let connection = database.connection()
            var record = try SubscribedRecord(database: connection, vault: database.vault)
            let old = (generation: record.generation, subscription: record.subscriptionID)
            try record.subscribeAgain(database: connection, vault: database.vault)
            let context = responderContext(database, sender: nil)
            #expect(try ScriptedSource(Self.heartbeat(old.subscription)).callback(record: record.id, generation: old.generation, context: context)
                == .unsubscribe)
            #expect(try ScriptedSource(Self.heartbeat(record.subscriptionID)).callback(record: record.id,
                                                                                       generation: record.generation, context: context)
                == .ok)
            #expect(try row(record.id, connection).registered, "an old subscription's callback leaves the live one alone")
        }

        @Test func aStaleSubscriptionIDIsAnsweredUnsubscribe() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            let context = responderContext(database, sender: nil)
            let source = ScriptedSource(MailEvents(subscriptionIDs: ["an-orphan-subscription"], newItemIDs: ["item-1"]))
            #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .unsubscribe)
            #expect(try row(record.id, connection).registered)
        }

        @Test func aFailureNamingTheLiveSubscriptionEndsIt() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            let context = responderContext(database, sender: nil)
            let failed = MailEvents(subscriptionIDs: [], newItemIDs: [],
                                    failures: [MailEvents.Failure(subscriptionID: record.subscriptionID, code: "ErrorReadEventsFailed")])
            #expect(try ScriptedSource(failed).callback(record: record.id, generation: record.generation, context: context) == .unsubscribe)
            #expect(try !row(record.id, connection).registered, "the record is left unsubscribed, so its devices are woken to register again")
        }

        @Test func aRegistrationStillBetweenSubscribeAndCommitIsAskedToRetry() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            // A second registration has subscribed (its URL names its generation) but not committed.
            let (pending,
                 _) = try #require(try MailSubscriptionStore(database: connection,
                                                             vault: database.vault).beginRegistration(recordID: record.id, now: .now()))
            let context = responderContext(database, sender: nil)
            let answer = try ScriptedSource(Self.heartbeat("sub-\(pending)")).callback(record: record.id, generation: pending, context: context)
            #expect(answer.status == 503)
            // The live subscription still hears OK.
            #expect(try ScriptedSource(Self.heartbeat(record.subscriptionID)).callback(record: record.id,
                                                                                       generation: record.generation, context: context)
                == .ok)
        }

        @Test func aRowEditedWithoutTheMasterKeyIsNotLookedUpAndTheServerRetries() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            try connection.execute("UPDATE EnsSubscriptionInfo SET backend_url = 'https://attacker.example.test/EWS' WHERE id = \(record.id)")
            let context = responderContext(database, sender: nil)
            let source = ScriptedSource(MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: ["item-1"]))
            #expect(try source.callback(record: record.id, generation: record.generation, context: context).status == 503)
            #expect(source.mailbox.asked.isEmpty)
        }

        // MARK: Heartbeats

        @Test func aHeartbeatIsNotedForTheLivenessBatchAndWrittenByItsFlush() throws {
            let connection = database.connection()
            let registeredAt = Timestamp.now().adding(seconds: -600)
            let record = try SubscribedRecord(database: connection, vault: database.vault, heardAt: registeredAt)
            try withSender { sender throws in
                let context = responderContext(database, sender: sender.path)
                #expect(try ScriptedSource(Self.heartbeat(record.subscriptionID)).callback(record: record.id,
                                                                                           generation: record.generation, context: context)
                    == .ok)
                let before = try row(record.id, connection)
                #expect(before.heardAt == registeredAt && before.watermark == "w-0", "nothing is written at once")
                #expect(try context.services.liveness.flush(database: connection) == 1)
                let after = try row(record.id, connection)
                #expect(after.heardAt.map { $0 > registeredAt.adding(seconds: 590) } == true && after.watermark == "w-beat")
                #expect(after.notifyCount == 0 && sender.take().isEmpty, "a heartbeat pushes nothing")
            }
        }

        // MARK: New mail

        static let mail = [MailSummary(itemID: "item-1", subject: "Quarterly figures", senderName: "Alice Example"),
                           MailSummary(itemID: "item-2", subject: "Lunch?", senderName: "Bob Example")]

        @Test func newMailIsHandedOnOncePerDeviceAndMessageWithItsLogRowAndIdsStableAcrossARedelivery() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault, devices: 2, badge: true)
            let deviceIDs = record.devices.map(\.id)
            let before = Timestamp.now()
            try withSender { sender throws in
                let context = responderContext(database, sender: sender.path)
                let events = MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: ["item-1", "item-2"], watermark: "w-mail")
                let source = ScriptedSource(events, summaries: Self.mail, unreadCount: 7)
                #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .ok)
                #expect(source.mailbox.asked == [["item-1", "item-2"]])

                let first = sender.take()
                #expect(first.count == 4, "one notification per device and message")
                #expect(Set(first.map(\.id)).count == 4)
                for device in record.devices {
                    let mine = first.filter { $0.deviceRowID == device.id }
                    #expect(mine.count == 2 && mine.allSatisfy { $0.deviceToken == device.token && $0.topic == "com.example.mail"
                        && $0.pushType == .alert })
                    let payloads = mine.map { String(decoding: $0.payload, as: UTF8.self) }
                    #expect(payloads.contains { $0.contains("Quarterly figures") && $0.contains("Alice Example") })
                    #expect(payloads.contains { $0.contains("Lunch?") && $0.contains("Bob Example") })
                    #expect(payloads.allSatisfy { $0.contains(#""badge":7"#) })
                }
                // Nothing to fetch, so each log row goes with its notification for the
                // sender to write: its history entry sealed to its id and device.
                #expect(try logged(deviceIDs, connection).isEmpty, "the responder writes no row without content")
                for notification in first {
                    let logRow = try #require(notification.logRow)
                    #expect(logRow.createdAtMilliseconds >= before.millisecondsSinceEpoch
                        && logRow.createdAtMilliseconds <= Timestamp.now().millisecondsSinceEpoch)
                    let id = try #require(Hex.decode(notification.id))
                    let summary = try database.vault.openLogEntry(try #require(logRow.summarySealed), part: .summary, notificationID: id,
                                                                  deviceID: try #require(notification.deviceRowID))
                    #expect(String(decoding: summary, as: UTF8.self).contains("Example"))
                    #expect(throws: (any Error).self, "bound to its device") {
                        try database.vault.openLogEntry(logRow.summarySealed ?? [], part: .summary, notificationID: id,
                                                        deviceID: notification.deviceRowID! + 1)
                    }
                }
                let written = try row(record.id, connection)
                #expect(written.watermark == "w-mail" && written.notifyCount == 4)

                // The mail server delivers the same batch again (it did not hear our OK):
                // the same ids, which are collapse ids, and no second log row.
                #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .ok)
                let again = sender.take()
                #expect(again.map(\.id).sorted() == first.map(\.id).sorted())
            }
        }

        /// The wire's bound on a history entry is the column's: a sealed summary the
        /// sender accepts always fits `NotificationLog.summary_sealed`.
        @Test func theWiresSummaryLimitIsTheColumnsWidth() throws {
            let row = try #require(try database.connection().queryOne("""
                SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.columns
                WHERE table_schema = DATABASE() AND table_name = 'NotificationLog' AND column_name = 'summary_sealed'
                """))
            #expect(try row.decode(Int64.self) == Int64(PushNotification.LogRow.maximumSummary))
        }

        /// A `secure` device's row holds the content it fetches when the push arrives:
        /// the responder writes it before the hand-off, and the notification carries none.
        @Test func aSecureDevicesRowIsWrittenBeforeTheHandOff() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault, devices: 2)
            let subscriptions = SubscriptionStore(database: connection, vault: database.vault)
            let secure = try #require(try subscriptions.device(recordID: record.id, token: record.devices[1].token))
            try subscriptions.setPrivacy(secure, recordID: record.id, DevicePrivacy(mode: .secure, previewKey: nil))
            try withSender { sender throws in
                let context = responderContext(database, sender: sender.path)
                let source = ScriptedSource(MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: ["item-1"]), summaries: Self.mail)
                #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .ok)
                let handed = sender.take()
                let secureOne = try #require(handed.first { $0.deviceRowID == secure.id })
                #expect(secureOne.logRow == nil)
                #expect(try logged([secure.id], connection) == [secureOne.id])
                #expect(handed.first { $0.deviceRowID == record.devices[0].id }?.logRow != nil)
                #expect(try logged([record.devices[0].id], connection).isEmpty)
            }
        }

        @Test func aSenderThatRefusesOrIsAwayGets503AndTheReservationBack() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            let events = MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: ["item-1", "item-2"])
            try withSender { sender throws in
                sender.refuse("spool-full")
                let refused = try ScriptedSource(events, summaries: Self.mail).callback(record: record.id, generation: record.generation,
                                                                                      context: responderContext(database, sender: sender.path))
                #expect(refused.status == 503)
                #expect(try row(record.id, connection).notifyCount == 0, "what the sender did not take is not charged against the cap")
                #expect(sender.take().isEmpty)
            }
            // Nothing listens at all.
            let away = try ScriptedSource(events, summaries: Self.mail).callback(record: record.id, generation: record.generation,
                                                                              context: responderContext(database, sender: nil))
            #expect(away.status == 503)
            #expect(try row(record.id, connection).notifyCount == 0)
            // Once the sender is back, the redelivered batch goes through.
            try withSender { sender throws in
                #expect(try ScriptedSource(events, summaries: Self.mail).callback(record: record.id, generation: record.generation,
                                                                                 context: responderContext(database, sender: sender.path)) == .ok)
                #expect(sender.take().count == 2)
            }
        }

        // MARK: Caps

        @Test func aBatchOverThePerCallbackCapIsOneSummaryPerDevice() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault, devices: 2)
            try withSender { sender throws in
                let context = responderContext(database, sender: sender.path) { $0.exchange.maximumItemsPerCallback = 2 }
                let items = ["item-1", "item-2", "item-3"]
                let source = ScriptedSource(MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: items), summaries: Self.mail)
                #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .ok)
                let lookedUp = source.mailbox.asked.flatMap { $0 }
                #expect(lookedUp.isEmpty, "a summarized batch is not looked up")
                let pushed = sender.take()
                #expect(pushed.count == 2 && Set(pushed.compactMap(\.deviceRowID)) == Set(record.devices.map(\.id)))
                #expect(pushed.allSatisfy { String(decoding: $0.payload, as: UTF8.self).contains("3 new messages") })
                #expect(try row(record.id, connection).notifyCount == 2)
            }
        }

        @Test func thePerMinuteCapSummarizesABatchThenDropsTheNext() throws {
            let connection = database.connection()
            let record = try SubscribedRecord(database: connection, vault: database.vault)
            try withSender { sender throws in
                let context = responderContext(database, sender: sender.path) { $0.exchange.maximumNotificationsPerMinute = 3 }
                func deliver(_ items: [String]) throws -> [PushNotification] {
                    let source = ScriptedSource(MailEvents(subscriptionIDs: [record.subscriptionID], newItemIDs: items), summaries: Self.mail)
                    #expect(try source.callback(record: record.id, generation: record.generation, context: context) == .ok)
                    return sender.take()
                }
                // Two of three: each message on its own.
                let first = try deliver(["item-1", "item-2"])
                #expect(first.count == 2 && !first.contains { String(decoding: $0.payload, as: UTF8.self).contains("new messages") })
                // Two more would pass the cap; the one left is a summary.
                let second = try deliver(["item-3", "item-4"])
                #expect(second.count == 1 && String(decoding: second[0].payload, as: UTF8.self).contains("2 new messages"))
                // Nothing left this minute: dropped, and answered OK (retrying cannot help).
                #expect(try deliver(["item-5"]).isEmpty)
                #expect(try row(record.id, connection).notifyCount == 3)
            }
        }
    }
}
