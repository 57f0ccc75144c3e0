internal import ENSModel
import Codecs
import MariaDB
import OpenSSL
import Testing
@testable import ENSStore
@testable import ENSVault

/// A callback's one read (`callbackRecordAndDevices`): the record and its notifiable
/// devices in one statement, which must give exactly what the record read and
/// `notifiableDevices` give apart: enabled devices proven at the record's endpoint, the
/// most recently active first (the lower id first between equals), at most the limit.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct CallbackReadTests {
    @Test func theJoinedReadGivesWhatTheTwoReadsGive() throws {
        let database = TestStack.administratorConnection(database: "ens")
        let vault = Vault(masterKey: try AESGCMKey(bytes: Digest.randomBytes(32)))
        let endpoint = "https://mail.example.test:443"
        let userID = Hex.encode(try Digest.randomBytes(32))
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, generation, mail_backend, backend_url,
                endpoint, subscription_id)
            VALUES (\(userID), 'pem', x'00', 1, 1, 'ews', 'https://mail.example.test/EWS/Exchange.asmx', \(endpoint), 'sub')
            """)
        let recordID = try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(userID)")?.int(0))
        defer { _ = try? database.execute("DELETE FROM EnsSubscriptionInfo WHERE id = \(recordID)") }
        let store = MailSubscriptionStore(database: database, vault: vault)
        let empty = try #require(try store.callbackRecordAndDevices(id: recordID, now: .now(), limit: 20))
        #expect(empty.record.id == recordID && empty.record.endpoint == endpoint && empty.devices.isEmpty)

        // Six devices: two checked in at the same moment, one disabled, one proven at
        // another server, and the rest at staggered times.
        let subscriptions = SubscriptionStore(database: database, vault: vault)
        let settings = DeviceSettings(bundleID: "com.example.mail", defaultSound: nil, ewsDeviceID: nil, badge: nil, development: nil)
        let checkIns = ["2026-11-27 10:00:00", "2026-11-27 12:00:00", "2026-11-27 12:00:00", "2026-11-27 11:00:00",
                        "2026-11-27 13:00:00", "2026-11-27 14:00:00"]
        for (index, checkIn) in checkIns.enumerated() {
            let token = try #require(DeviceToken(hex: Hex.encode(try Digest.randomBytes(32))))
            _ = try subscriptions.register(recordID: recordID, token: token, settings: settings,
                                           endpoint: index == 5 ? "https://elsewhere.example.test:443" : endpoint, now: .now())
            try database.execute("""
                UPDATE Devices SET last_checkin_at = \(checkIn), disabled_at = \(index == 4 ? "2026-11-27 13:30:00" : nil)
                WHERE subscription_row = \(recordID) AND token_hash = \(vault.tokenHash(token))
                """)
        }
        for limit in [1, 2, 3, 20] {
            let (record, joined) = try #require(try store.callbackRecordAndDevices(id: recordID, now: .now(), limit: limit))
            let apart = try store.notifiableDevices(recordID: recordID, endpoint: record.endpoint, now: .now(), limit: limit)
            #expect(joined.count == min(limit, 4), "limit \(limit)")
            #expect(joined.map(\.device.id) == apart.map(\.device.id), "limit \(limit)")
            #expect(joined.map(\.token.value) == apart.map(\.token.value), "limit \(limit)")
        }
        #expect(try store.callbackRecordAndDevices(id: recordID + 1_000_000_000, now: .now(), limit: 20) == nil)
    }
}
