import Curl
import Foundation
import MariaDB
import POSIX
import Testing

/// ens-cron's jobs against the real database, with crafted rows and an injected clock.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct MaintenanceTests {
    let api: DeviceClient
    let database: Connection

    init() throws {
        api = try DeviceClient(token: try TestStack.newToken("maintenance-tests"))
        database = try TestStack.serviceConnection()
    }

    /// Runs an ens-cron job with the test config, optionally at a given time.
    @discardableResult
    func cron(_ arguments: [String], now: Date? = nil) throws -> String {
        var all = arguments + ["--config", TestStack.directory + "/ens.conf"]
        if let now { all += ["--now", String(Int64(now.timeIntervalSince1970 * 1000))] }
        return try TestStack.run(TestStack.root + "/.build/debug/ens-cron", all)
    }

    func subscribedUserWithDevice(_ token: String) throws -> (TestUser, Int64) {
        let (user, row, _) = try subscribedUserWithTaggedDevice(token)
        return (user, row)
    }

    /// As `subscribedUserWithDevice`, with the device's push tag as registration answered it.
    func subscribedUserWithTaggedDevice(_ token: String) throws -> (TestUser, Int64, String?) {
        let user = try api.newUser()
        try user.pretendSubscribed(database: database, oauthToken: "maintenance-oauth")
        let creds = try user.sealJSON(["apnsToken": token, "oauthAccessToken": "maintenance-oauth"])
        let answer = try api.call("/registerdevicev2", ["userid": user.userID, "email": user.email, "creds": creds, "bundleid": "com.example.mail"])
        #expect(answer.json["responseCode"] == "UserUpdated")
        let row = try #require(try database.queryOne("""
            SELECT d.id
            FROM Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.userID)
            """)?.int(0))
        return (user, row, answer.json["pushTag"])
    }

    func count(_ query: Query) throws -> Int64 { try database.queryOne(query)?.int(0) ?? -1 }

    @Test func reapRemovesStaleDevicesThenEmptyRecordsAndIsIdempotent() throws {
        let (user, row) = try subscribedUserWithDevice(TestSecrets.apnsToken())
        let (fresh, freshRow) = try subscribedUserWithDevice(TestSecrets.apnsToken())
        // 31 days without a check-in (the default limit is 30).
        try database.execute("UPDATE Devices SET last_checkin_at = NOW(3) - INTERVAL 31 DAY WHERE id = \(row)")
        try database.execute("""
            UPDATE EnsSubscriptionInfo
            SET created_at = NOW(3) - INTERVAL 40 DAY, last_checkin_at = NOW(3) - INTERVAL 31 DAY
            WHERE userid = \(user.userID)
            """)
        let first = try cron(["reap"])
        #expect(first.contains("1 stale devices") || first.contains("stale devices"))
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row)") == 0)
        #expect(try count("SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(user.userID)") == 0)
        // The fresh device and its record stay.
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(freshRow)") == 1)
        #expect(try count("SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(fresh.userID)") == 1)
        // A second run changes nothing.
        #expect(try cron(["reap"]).hasPrefix("reap: 0 stale devices, 0 disabled devices, 0 empty records"))
        // Forty days later, the fresh one is stale too.
        _ = try cron(["reap"], now: Date().addingTimeInterval(40 * 86400))
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(freshRow)") == 0)
    }

    @Test func reapRemovesLongDisabledTokensButNotNewRecords() throws {
        let (_, row) = try subscribedUserWithDevice(TestSecrets.apnsToken())
        try database.execute("UPDATE Devices SET disabled_at = NOW(3) - INTERVAL 8 DAY WHERE id = \(row)")
        let newcomer = try api.newUser()  // no device yet: must survive its first days
        _ = try cron(["reap"])
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row)") == 0)
        #expect(try count("SELECT COUNT(*) FROM EnsSubscriptionInfo WHERE userid = \(newcomer.userID)") == 1)
    }

    @Test func syncKeysPastTheirExpiryAreErased() throws {
        let (_, row) = try subscribedUserWithDevice(TestSecrets.apnsToken())
        try database.execute("UPDATE Devices SET sync_key_sealed = X'00112233', sync_key_expires_at = NOW(3) + INTERVAL 1 HOUR WHERE id = \(row)")
        #expect(try cron(["sync-keys"]).contains("sync-keys: 0 "))
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row) AND sync_key_sealed IS NOT NULL") == 1)
        _ = try cron(["sync-keys"], now: Date().addingTimeInterval(2 * 3600))
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row) AND sync_key_sealed IS NULL AND sync_key_expires_at IS NULL") == 1)
    }

    @Test func anOverlappingRunSkipsCleanly() throws {
        let (_, row) = try subscribedUserWithDevice(TestSecrets.apnsToken())
        try database.execute("UPDATE Devices SET last_checkin_at = NOW(3) - INTERVAL 31 DAY WHERE id = \(row)")
        let lock = try #require(try Files.tryLock(TestStack.directory + "/run/ens-cron.lock"))
        let skipped = try cron(["reap"])  // exits 0
        #expect(!skipped.contains("reap:"))
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row)") == 1)
        FileDescriptor.close(lock)
        _ = try cron(["reap"])
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row)") == 0)
    }

    @Test func renewWakesDevicesOfDeadSubscriptionsWhichThenReRegister() throws {
        let token = TestSecrets.apnsToken()
        let (user, row) = try subscribedUserWithDevice(token)
        // Healthy: nothing happens.
        #expect(try cron(["renew"]).contains("renew: 0 subscriptions"))
        // No heartbeat for 30 min + grace.
        try database.execute("UPDATE EnsSubscriptionInfo SET last_callback_at = NOW(3) - INTERVAL 36 MINUTE WHERE userid = \(user.userID)")
        #expect(try cron(["renew"]).contains("renew: 1 subscriptions marked not subscribed, 1 wake-up pushes"))
        // The silent push reaches APNs: background, priority 5.
        let woke = TestStack.eventually(within: 10) {
            APNsSimulator.accepted().contains { $0.token == token && $0.pushType == "background" && $0.priority == 5 }
        }
        #expect(woke)
        // The device checks in and is told to register again.
        let payload = try user.sealJSON(["pushToken": token, "lastMessageDate": "01/01/2020 00:00:00.000", "ignoreLastMessageDate": 1])
        let status = try api.call("/getsubscriptionstatusv2", ["userid": user.userID, "subscriptionPayload": payload])
        #expect(status.json["responseCode"] == "UserRecordPresentNotSubscribed")
        // Rate limited: a second run sends nothing more.
        #expect(try cron(["renew"]).contains("renew: 0 subscriptions marked not subscribed, 0 wake-up pushes"))
        #expect(try count("SELECT COUNT(*) FROM Devices WHERE id = \(row) AND last_wakeup_at IS NOT NULL") == 1)
    }

    /// The wake-up push names the mailbox only where a mail push would: a `preview`
    /// device by `ens.userid` (the contract's form), any other by its opaque `ens.tag`,
    /// so Apple and Google cannot tell whose subscription lapsed.
    @Test func wakeUpsNameOnlyPreviewDevicesByTheAddressHash() throws {
        let previewToken = TestSecrets.apnsToken(), genericToken = TestSecrets.apnsToken()
        let (previewUser, _) = try subscribedUserWithDevice(previewToken)
        let (genericUser, genericRow, genericTag) = try subscribedUserWithTaggedDevice(genericToken)
        try database.execute("UPDATE Devices SET privacy_mode = 1 WHERE id = \(genericRow)")
        try TestStack.rebindDevice(id: genericRow, database: database)
        for user in [previewUser, genericUser] {
            try database.execute("UPDATE EnsSubscriptionInfo SET last_callback_at = NOW(3) - INTERVAL 36 MINUTE WHERE userid = \(user.userID)")
        }
        #expect(try cron(["renew"]).contains("2 wake-up pushes"))
        func wakeUp(_ token: String) -> [String: Any]? {
            var found: [String: Any]?
            _ = TestStack.eventually(within: 10) {
                found = APNsSimulator.accepted().first { $0.token == token && $0.pushType == "background" }?.payload["ens"] as? [String: Any]
                return found != nil
            }
            return found
        }
        let preview = try #require(wakeUp(previewToken))
        #expect(preview["userid"] as? String == previewUser.userID)
        #expect(preview["action"] as? String == "resubscribe")
        let generic = try #require(wakeUp(genericToken))
        #expect(generic["userid"] == nil)
        #expect(generic["action"] as? String == "resubscribe")
        // The tag is the one registration answered (pushTag): the app knows the account.
        let tag = try #require(generic["tag"] as? String)
        #expect(tag.count == 16 && tag == genericTag)
        let payload = try genericUser.sealJSON(["pushToken": genericToken, "lastMessageDate": "01/01/2020 00:00:00.000", "ignoreLastMessageDate": 1])
        let status = try api.call("/getsubscriptionstatusv2", ["userid": genericUser.userID, "subscriptionPayload": payload])
        #expect(status.json["responseCode"] == "UserRecordPresentNotSubscribed")
    }

    @Test func keysRefillsThePool() throws {
        // The stack's own refiller (cron's stand-in) would race this run.
        try TestStack.stack("keys-stop")
        defer { _ = try? TestStack.stack("keys-start") }
        try database.execute("DELETE FROM KeyPool")
        _ = try cron(["keys"])
        #expect(try count("SELECT COUNT(*) FROM KeyPool") == 20)  // keys.pool_size in the test config
        _ = try cron(["keys"])
        #expect(try count("SELECT COUNT(*) FROM KeyPool") == 20)
    }

    @Test func apiKeysPublishesTokensAddedToTheDatabase() throws {
        // A token row added straight to the database (as another host's ens-cron would).
        let token = "ens_" + (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        TestSecrets.remember(token)
        let hash = try TestStack.run("/bin/sh", ["-c", "printf %s '\(token)' | openssl dgst -sha256 -r | cut -d' ' -f1"])
        try database.execute("INSERT INTO APITokens (token_hash, label) VALUES (UNHEX(\(hash)), 'from-another-host')")
        #expect(try api.call("/getpublickey", ["email": "x@example.test"], apiToken: token).status == 401)
        _ = try cron(["api-keys"])
        #expect(try api.call("/getpublickey", ["email": "x@example.test"], apiToken: token).status == 200)
    }

    @Test func allRunsEveryJob() throws {
        let output = try cron(["all"])
        #expect(output.contains("reap:") && output.contains("renew:") && output.contains("sync-keys:"))
    }

    /// The operator's view: after `all`, every job's last run is "ok"; subscriptions by
    /// backend, devices by app and provider, the spool, tokens and the key pool, as text
    /// and as JSON, and never a user id, address or token.
    @Test func statusShowsHealthWithoutPersonalData() throws {
        let (user, _) = try subscribedUserWithDevice(TestSecrets.apnsToken())
        try cron(["all"])
        let text = try cron(["status"])
        for section in ["Subscriptions", "Devices", "Spool (ens-sender)", "Cron jobs", "API tokens:", "RSA key pool:"] {
            #expect(text.contains(section), "\(section) in \(text)")
        }
        #expect(text.contains("com.example.mail") && text.contains("apns"))
        let jobs = text.split(separator: "\n").filter { line in ["api-keys",
            "reap", "renew", "sync-keys", "keys", "gauges"].contains { line.hasPrefix("  \($0) ") } }
        #expect(jobs.count == 6 && jobs.allSatisfy { $0.contains(" ok ") }, "\(jobs)")

        let json = try #require(try JSONSerialization.jsonObject(with: Data(cron(["status", "--json"]).utf8)) as? [String: Any])
        let subscriptions = try #require(json["subscriptions"] as? [[String: Any]])
        #expect(Set(subscriptions.compactMap { $0["backend"] as? String }).isSuperset(of: ["ews", "graph"]))
        let ews = try #require(subscriptions.first { $0["backend"] as? String == "ews" })
        #expect((ews["healthy"] as? Int ?? 0) >= 1)
        let devices = try #require(json["devices"] as? [[String: Any]])
        // The stack has an APNs key and an FCM service account for com.example.mail.
        #expect(devices.contains { $0["app"] as? String == "com.example.mail" && $0["pushCredentials"] as? String == "apns+fcm"
            && ($0["enabled"] as? Int ?? 0) >= 1 }, "\(devices)")
        let spool = try #require(json["spool"] as? [String: Any])
        #expect(spool["pending"] is Int)
        let cronJobs = try #require(json["cronJobs"] as? [[String: Any]])
        #expect(cronJobs.count == 6 && cronJobs.allSatisfy { $0["outcome"] as? String == "ok" && $0["lastRun"] is String })
        #expect(((json["apiTokens"] as? [String: Any])?["active"] as? Int ?? 0) >= 1)
        #expect((json["keyPool"] as? [String: Any])?["target"] is Int)
        for output in [text, try cron(["status", "--json"])] {
            #expect(!output.contains(user.userID) && !output.contains(user.email) && !output.contains("@"))
        }
    }

    /// A job that fails is recorded as failed (its error goes to the journal), and the
    /// status file survives garbage.
    @Test func aFailedJobIsRecordedAsFailed() throws {
        let statusFile = TestStack.directory + "/lib/cron-status"
        let broken = TestStack.directory + "/broken-db.conf"
        let config = try String(contentsOfFile: TestStack.directory + "/ens.conf", encoding: .utf8)
            .replacingOccurrences(of: "db.socket = ", with: "db.socket = /nonexistent/mysqld.sock\n#")
        try config.write(toFile: broken, atomically: true, encoding: .utf8)
        let (status, _) = try ChildProcess.run(TestStack.root + "/.build/debug/ens-cron", ["reap", "--config", broken])
        #expect(status == 1)
        let lines = try String(contentsOfFile: statusFile, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("reap failed ") }, "\(lines)")
        try (String(contentsOfFile: statusFile, encoding: .utf8) + "garbage line\n\u{0}\u{1}\n").write(toFile: statusFile,
            atomically: true, encoding: .utf8)
        try cron(["reap"])
        let after = try String(contentsOfFile: statusFile, encoding: .utf8)
        #expect(after.contains("reap ok ") && !after.contains("garbage"))
        #expect(try cron(["status"]).contains("Cron jobs"))
    }
}
