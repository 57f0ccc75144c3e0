import ENSModel
import ENSStore
import ENSTestSupport
import Logging
import MariaDB
import SenderWire
import Testing
@testable import MailBackends

extension OnAThrowawayDatabase {
    /// Exchange's keeper (`HeartbeatKeeper`, in `ens-cron renew`) in process: a subscription
    /// not heard from within its heartbeat plus the grace is marked lapsed, its devices get
    /// one silent wake-up push through the sender's socket, and a second run within the
    /// wake-up interval sends nothing. On a schema of its own: the keeper reads every record.
    @Suite struct HeartbeatKeeperTests {
        let database = ThrowawayENSDatabase.shared

        @Test func aLapsedSubscriptionIsEndedAndItsDevicesWokenOnce() throws {
            let connection = try database.separateSchema()
            let now = Timestamp.now()
            // Heartbeat every 30 minutes: one heard from 2 hours ago, one a minute ago.
            let lapsed = try SubscribedRecord(database: connection, vault: database.vault, devices: 2, heardAt: now.adding(seconds: -7200))
            let alive = try SubscribedRecord(database: connection, vault: database.vault, heardAt: now.adding(seconds: -60))
            let policy = Maintenance.Policy(deviceRetention: .seconds(90 * 86400),
                                            disabledRetention: .seconds(86400), emptyRecordRetention: .seconds(86400),
                                            subscriptionGrace: .seconds(300), wakeupInterval: .seconds(3600))
            let maintenance = Maintenance(database: connection, policy: policy, now: now,
                                          logger: Logger(label: "keeper", factory: { _ in SwiftLogNoOpLogHandler() }))
            try withTemporaryDirectory { directory in
                let sender = try StandInSender(directory: directory)
                defer { sender.stop() }
                let client = SenderClient(socketPath: sender.path)
                let counts = try maintenance.renew(vault: database.vault, sender: client, privacyFloor: .preview,
                                                   keepers: [HeartbeatKeeper(backend: .ews)])
                #expect(counts == Maintenance.RenewCounts(deadSubscriptions: 1, wakeups: 2, wakeupsRefused: 0))
                let registered = try connection.query("SELECT id, registered FROM EnsSubscriptionInfo ORDER BY id").map { try $0.decode(Int64.self,
                    Bool.self) }
                #expect(registered.map(\.0) == [lapsed.id, alive.id] && registered.map(\.1) == [false, true])
                let woken = sender.take()
                #expect(Set(woken.compactMap(\.deviceRowID)) == Set(lapsed.devices.map(\.id)))
                #expect(woken.allSatisfy { $0.pushType == .background && String(decoding: $0.payload,
                                                                                as: UTF8.self).contains(#""action":"resubscribe""#) })
                // Again within the wake-up interval: nothing more.
                #expect(try maintenance.renew(vault: database.vault, sender: client, privacyFloor: .preview) == Maintenance.RenewCounts())
                #expect(sender.take().isEmpty)
            }
        }
    }
}
