import Curl
@testable import ENSModel
@testable import SenderWire
@testable import ENSSender
import Foundation
import MariaDB
import POSIX
import Synchronization
import Testing

/// ens-sender end to end: Unix socket → durable spool → HTTP/2 → the APNs simulator.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct SenderTests {
    let client = SenderClient(socketPath: TestStack.directory + "/run/apns.sock")

    static func id() -> String {
        (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    static func notification(token: String, id: String = id(), pushType: PushNotification.PushType = .alert,
                             device: Int64? = nil, subject: String = "Quarterly numbers") -> PushNotification {
        let payload = pushType == .alert
            ? #"{"aps":{"alert":{"title":"Alice","body":"\#(subject)"},"sound":"chime.caf"},"ens":{"userid":"abc"}}"#
            : #"{"aps":{"content-available":1}}"#
        return PushNotification(
            id: id, deviceToken: DeviceToken(hex: token)!, topic: "com.example.mail", environment: .sandbox,
            pushType: pushType, expiration: Int64(Date().timeIntervalSince1970) + 3600, payload: Array(payload.utf8), deviceRowID: device
        )
    }

    func waitForAccepted(_ ids: Set<String>, within seconds: Double) -> Bool {
        TestStack.eventually(within: seconds) {
            ids.isSubset(of: Set(APNsSimulator.accepted().compactMap(\.collapseID)))
        }
    }

    @Test func aNotificationReachesAPNsWithTheRightHeaders() throws {
        let token = TestSecrets.apnsToken()
        let alert = Self.notification(token: token)
        #expect(try client.submit(alert) == .accepted)
        let background = Self.notification(token: token, pushType: .background)
        #expect(try client.submit(background) == .accepted)
        #expect(waitForAccepted([alert.id, background.id], within: 10))
        let records = APNsSimulator.accepted().filter { $0.token == token }
        let alertRecord = try #require(records.first { $0.collapseID == alert.id })
        #expect(alertRecord.topic == "com.example.mail")
        #expect(alertRecord.pushType == "alert")
        #expect(alertRecord.priority == 10)
        #expect(((alertRecord.payload["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String == "Quarterly numbers")
        let backgroundRecord = try #require(records.first { $0.collapseID == background.id })
        #expect(backgroundRecord.pushType == "background")
        #expect(backgroundRecord.priority == 5)
        // The spool keeps nothing readable: content is sealed at rest.
        let segments = (try? FileManager.default.contentsOfDirectory(atPath: TestStack.directory + "/spool/log")) ?? []
        #expect(segments.contains { $0.hasSuffix(".seg") })  // the segment being written is never empty here
        for name in segments {
            let data = FileManager.default.contents(atPath: TestStack.directory + "/spool/log/" + name) ?? Data()
            #expect(!String(decoding: data, as: UTF8.self).contains("Quarterly"))
            #expect(data.range(of: Data(token.utf8)) == nil)
        }
    }

    /// com.example.certapp has a PKCS#12 certificate configured (scripts/stack.sh); every
    /// other topic uses the provider token. Both share the sender, not connections.
    @Test func certificateAuthIsUsedForTopicsThatHaveOne() throws {
        let token = TestSecrets.apnsToken()
        var byCertificate = Self.notification(token: token, subject: "Signed by certificate")
        byCertificate.topic = "com.example.certapp"
        let byToken = Self.notification(token: token, subject: "Signed by token")
        #expect(try client.submit(byCertificate) == .accepted)
        #expect(try client.submit(byToken) == .accepted)
        #expect(waitForAccepted([byCertificate.id, byToken.id], within: 10))
        let records = APNsSimulator.accepted().filter { $0.token == token }
        let certificateRecord = try #require(records.first { $0.collapseID == byCertificate.id })
        #expect(certificateRecord.auth == "certificate")
        #expect(certificateRecord.jwt.isEmpty)
        #expect(certificateRecord.topic == "com.example.certapp")
        let tokenRecord = try #require(records.first { $0.collapseID == byToken.id })
        #expect(tokenRecord.auth == "token")
        #expect(!tokenRecord.jwt.isEmpty)
    }

    @Test func badInputIsRefusedAndTheSenderStaysUp() throws {
        // A notification that is not one.
        var broken = Self.notification(token: TestSecrets.apnsToken())
        broken.payload = Array(#"{"no-aps":1}"#.utf8)
        #expect(try client.submit(broken) == .refused("bad-notification"))
        // Garbage instead of a frame, and a frame of a future version.
        for garbage: [UInt8] in [Array("GET / HTTP/1.1\r\n\r\n".utf8), [0x45, 0x4E, 9, 1, 0, 0, 0, 0]] {
            let fd = try UnixSocket.connect(path: client.socketPath)
            defer { FileDescriptor.close(fd) }
            FileDescriptor.setTimeouts(fd, milliseconds: 5000)
            try FileDescriptor.writeAll(fd, garbage)
            var decoder = FrameDecoder()
            decoder.append(try FileDescriptor.read(fd))
            #expect(try decoder.next()?.kind == .refused)
        }
        #expect(try client.submit(Self.notification(token: TestSecrets.apnsToken())) == .accepted)
    }

    /// Reads frames from `fd` until `count` arrived (or the sender hung up).
    static func readAnswers(_ fd: Int32, count: Int) throws -> [Frame] {
        var decoder = FrameDecoder()
        var frames: [Frame] = []
        while frames.count < count {
            let bytes = try FileDescriptor.read(fd)
            if bytes.isEmpty { break }
            decoder.append(bytes)
            while let frame = try decoder.next() { frames.append(frame) }
        }
        return frames
    }

    /// Frames sent together are answered in the order they came, each on its own
    /// merits; a malformed one is answered and then the connection is closed.
    @Test func framesSentTogetherAreAnsweredInOrder() throws {
        let first = Self.notification(token: TestSecrets.apnsToken())
        var invalid = Self.notification(token: TestSecrets.apnsToken())
        invalid.payload = Array(#"{"no-aps":1}"#.utf8)
        let last = Self.notification(token: TestSecrets.apnsToken())
        let fd = try UnixSocket.connect(path: client.socketPath)
        defer { FileDescriptor.close(fd) }
        FileDescriptor.setTimeouts(fd, milliseconds: 10_000)
        let together = [first, invalid, last].flatMap { Frame(kind: .submit, payload: $0.json).encoded }
        try FileDescriptor.writeAll(fd, together + Array("garbage!".utf8))
        let answers = try Self.readAnswers(fd, count: 5)
        #expect(answers == [
            Frame(kind: .accepted, payload: Array(first.id.utf8)),
            Frame(kind: .refused, payload: Array("bad-notification".utf8)),
            Frame(kind: .accepted, payload: Array(last.id.utf8)),
            Frame(kind: .refused, payload: Array("bad-frame".utf8)),
        ])
        #expect(try FileDescriptor.read(fd).isEmpty)  // hung up after the malformed frame
        #expect(waitForAccepted([first.id, last.id], within: 10))
    }

    /// A responder that sends without reading its answers is not read from until it
    /// does; everyone else is served meanwhile, and nothing it sent is lost.
    @Test func aResponderThatDoesNotReadDoesNotHoldUpOthers() throws {
        let flood = (0..<12_000).map { _ in Self.notification(token: TestSecrets.apnsToken(), pushType: .background) }
        let bytes = flood.flatMap { Frame(kind: .submit, payload: $0.json).encoded }
        let fd = try UnixSocket.connect(path: client.socketPath)
        defer { FileDescriptor.close(fd) }
        FileDescriptor.setTimeouts(fd, milliseconds: 20_000)
        // Written from another thread: its answers (480 KB) outgrow the socket buffers, so
        // the sender stops reading it and this write blocks until the answers are read.
        let written = Atomic<Bool>(false)
        let writer = try OSThread.start {
            try? FileDescriptor.writeAll(fd, bytes)
            written.store(true, ordering: .releasing)
        }
        sleepMilliseconds(1000)
        let other = Self.notification(token: TestSecrets.apnsToken())
        #expect(try client.submit(other) == .accepted)
        let stillWriting = !written.load(ordering: .acquiring)
        #expect(stillWriting)  // held back, and yet the other responder was served
        let answers = try Self.readAnswers(fd, count: flood.count)
        writer.join()
        #expect(answers.count == flood.count)
        #expect(answers.map(\.payload) == flood.map { Array($0.id.utf8) })
        #expect(answers.allSatisfy { $0.kind == .accepted })
        // Delivery, not speed, is the claim: the deadline only bounds the wait (12,000
        // pushes on a loaded 2-core CI host can take a minute), and the result is a Bool
        // so a failure names the test instead of printing 12,000 ids.
        let allDelivered = waitForAccepted(Set(flood.map(\.id)).union([other.id]), within: 180)
        #expect(allDelivered, "every flooded notification and the other responder's reach APNs")
    }

    @Test func beyondTheConnectionLimitANewConnectionIsToldBusy() throws {
        var held: [Int32] = []
        defer { held.forEach(FileDescriptor.close) }
        for _ in 0..<Ingest.maximumConnections { held.append(try UnixSocket.connect(path: client.socketPath)) }
        // Accepted in the order they connected, so this one comes after all of the above.
        let extra = try UnixSocket.connect(path: client.socketPath)
        defer { FileDescriptor.close(extra) }
        FileDescriptor.setTimeouts(extra, milliseconds: 10_000)
        #expect(try Self.readAnswers(extra, count: 1) == [Frame(kind: .refused, payload: Array("busy".utf8))])
        held.forEach(FileDescriptor.close)
        held = []
        #expect(TestStack.eventually(within: 10) {
            (try? client.submit(Self.notification(token: TestSecrets.apnsToken()))) == .accepted
        })
    }

    @Test func aRejectedTokenIsDisabledAndARegistrationEnablesItAgain() throws {
        let api = try DeviceClient(token: try TestStack.newToken("sender-tests"))
        let user = try api.newUser()
        let database = try TestStack.serviceConnection()
        try user.pretendSubscribed(database: database, oauthToken: "sender-test-oauth")
        let token = TestSecrets.apnsToken()
        let creds = try user.sealJSON(["apnsToken": token, "oauthAccessToken": "sender-test-oauth"])
        let register = { try api.call("/registerdevicev2",
                                      ["userid": user.userID, "email": user.email, "creds": creds, "bundleid": "com.example.mail"]) }
        #expect(try register().json["responseCode"] == "UserUpdated")
        let row = try #require(try database.queryOne("""
            SELECT d.id
            FROM Devices d
            JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
            WHERE s.userid = \(user.userID)
            """)?.int(0))

        try APNsSimulator.fail(token: token, status: 410, reason: "Unregistered")
        let doomed = Self.notification(token: token, device: row)
        #expect(try client.submit(doomed) == .accepted)
        let disabled = TestStack.eventually(within: 10) {
            (try? database.queryOne("SELECT disabled_at IS NOT NULL FROM Devices WHERE id = \(row)")?.int(0)) == 1
        }
        #expect(disabled)
        // Never retried: the simulator saw it once, as a rejection, and accepted nothing.
        #expect(!APNsSimulator.accepted().contains { $0.collapseID == doomed.id })

        // The device registers the token again after APNs's verdict: enabled again.
        Thread.sleep(forTimeInterval: 0.01)
        #expect(try register().json["responseCode"] == "UserUpdated")
        #expect(try database.queryOne("SELECT disabled_at IS NULL FROM Devices WHERE id = \(row)")?.int(0) == 1)
        _ = try APNsSimulator.control("/reset", [:])
    }

    /// A credential mistake (a revoked APNs key, a certificate for another app) must not
    /// discard the queue: the app's notifications wait in the spool, one probes after
    /// each pause (1 s, then 2 s in the test stack), and delivery resumes once APNs
    /// accepts the credential again. One critical line says so, not one per notification.
    @Test func aRefusedCredentialKeepsItsNotificationsUntilItIsAcceptedAgain() throws {
        func counter(_ outcome: String) throws -> Double {
            let line = try TestStack.metrics().bodyText.split(separator: "\n")
                .first { $0.hasPrefix(#"ens_push_notifications_total{outcome="\#(outcome)",provider="apns"}"#)
                    || $0.hasPrefix(#"ens_push_notifications_total{provider="apns",outcome="\#(outcome)"}"#) }
            return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        }
        _ = try APNsSimulator.control("/reset", [:])
        let token = TestSecrets.apnsToken()
        try APNsSimulator.fail(token: token, status: 403, reason: "InvalidProviderToken", count: 2)
        let dropped = try counter("dropped")
        let kept = Self.notification(token: token)
        #expect(try client.submit(kept) == .accepted)
        #expect(waitForAccepted([kept.id], within: 30), "refused twice, kept, delivered once the credential is accepted")
        let rejected = try APNsSimulator.stats()["rejected"] as? [String: Any] ?? [:]
        #expect((rejected["403 InvalidProviderToken"] as? NSNumber)?.intValue == 2, "\(rejected)")
        #expect(TestStack.eventually(within: 10) { (try? counter("credential_refused")) ?? 0 >= 2 })
        #expect(try counter("dropped") == dropped, "nothing dropped")
        let log = try String(contentsOfFile: TestStack.directory + "/log/ens-sender.log", encoding: .utf8)
        #expect(log.contains("refused the app's credential") && log.contains("accepts the app's credential again"))
        _ = try APNsSimulator.control("/reset", [:])
    }

    @Test func transientFailuresAreRetriedUntilDelivered() throws {
        let token = TestSecrets.apnsToken()
        try APNsSimulator.fail(token: token, status: 503, reason: "ServiceUnavailable", count: 1)
        let first = Self.notification(token: token)
        #expect(try client.submit(first) == .accepted)
        try APNsSimulator.fail(token: TestSecrets.apnsToken(), status: 429, reason: "TooManyRequests", count: 1)
        #expect(waitForAccepted([first.id], within: 15))
        _ = try APNsSimulator.control("/reset", [:])
    }

    /// APNs and FCM notifications together: a quarter of the burst goes to Android.
    @Test func killNineMidBurstLosesNothing() throws {
        let total = 10_000
        let notifications = (0..<total).map { index in
            index % 4 == 3 ? FCMTests.notification(token: TestSecrets.fcmToken(), subject: "burst")
                           : Self.notification(token: TestSecrets.apnsToken(), subject: "burst")
        }
        let accepted = SynchronizedStatuses()
        let killed = SynchronizedStatuses()
        var threads: [OSThread] = []
        let perThread = total / 8
        for worker in 0..<8 {
            let slice = Array(notifications[(worker * perThread)..<((worker + 1) * perThread)])
            threads.append(try OSThread.start(stackSize: 1 << 20) {
                for notification in slice {
                    // Keep trying until the (restarted) sender acknowledges it (for a minute at most).
                    let deadline = Date().addingTimeInterval(60)
                    while (try? client.submit(notification)) != .accepted {
                        if Date() > deadline { return }
                        Thread.sleep(forTimeInterval: 0.05)
                    }
                    accepted.append(1)
                    // Once a third is in (at least: eight threads count at once), one thread kills.
                    if accepted.values.count >= total / 3, killed.appendIfEmpty(1) {
                        if let pid = TestStack.pids(matching: "ens-sender --config").first {
                            kill(pid, SIGKILL)
                            killed.append(Int(pid))
                            // Restart only once it is really gone.
                            _ = TestStack.eventually(within: 10) { kill(pid, 0) != 0 }
                        }
                        _ = try? TestStack.stack("sender-start")
                    }
                }
            })
        }
        for thread in threads { thread.join() }
        #expect(killed.values.count == 2, "the sender was killed once")
        #expect(accepted.values.count == total)
        let apnsIDs = Set(notifications.filter { $0.deviceToken.provider == .apns }.map(\.id))
        let fcmIDs = Set(notifications.filter { $0.deviceToken.provider == .fcm }.map(\.id))
        #expect(waitForAccepted(apnsIDs, within: 120),
                "APNs: delivered \(apnsIDs.intersection(Set(APNsSimulator.accepted().compactMap(\.collapseID))).count) of \(apnsIDs.count)")
        let fcmDelivered = TestStack.eventually(within: 120) { fcmIDs.isSubset(of: Set(FCMSimulator.accepted().compactMap(\.collapseKey))) }
        #expect(fcmDelivered,
                "FCM: delivered \(fcmIDs.intersection(Set(FCMSimulator.accepted().compactMap(\.collapseKey))).count) of \(fcmIDs.count)")
        // The provider token is minted once per sender start, not per request.
        let jwts = Set(APNsSimulator.accepted().filter { apnsIDs.contains($0.collapseID ?? "") }.map(\.jwt))
        #expect(jwts.count <= 2)
    }

    /// The log rows responders leave to the sender (PushNotification.logRow) survive a
    /// kill -9 mid-burst: a notification delivered before its row's batch was written
    /// is still in the spool, and the restarted sender writes the row.
    @Test func killNineMidBurstLosesNoLogRow() throws {
        let user = try RegisteredUser.register(with: DeviceClient(token: try TestStack.newToken("sender-log-rows")))
        let database = try TestStack.serviceConnection()
        defer { database.disconnect() }
        let device = try #require(try database.queryOne("""
            SELECT d.id FROM Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row WHERE s.userid = \(user.user.userID)
            """)).decode(Int64.self)
        let total = 3_000
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let notifications = (0..<total).map { index in
            var notification = Self.notification(token: TestSecrets.apnsToken(), device: device, subject: "logged burst")
            notification.logRow = PushNotification.LogRow(createdAtMilliseconds: now + Int64(index), summarySealed: nil)
            return notification
        }
        var killed = false
        for (index, notification) in notifications.enumerated() {
            let deadline = Date().addingTimeInterval(60)
            while (try? client.submit(notification)) != .accepted {
                #expect(Date() < deadline, "the restarted sender takes notifications again")
                if Date() > deadline { return }
                Thread.sleep(forTimeInterval: 0.05)
            }
            // Once a third is in, while the sender delivers the first ones: kill -9, restart.
            if index == total / 3, let pid = TestStack.pids(matching: "ens-sender --config").first {
                kill(pid, SIGKILL)
                _ = TestStack.eventually(within: 10) { kill(pid, 0) != 0 }
                try TestStack.stack("sender-start")
                killed = true
            }
        }
        #expect(killed, "the sender was killed once")
        let ids = notifications.map(\.id)
        let written = TestStack.eventually(within: 60) {
            let row = try? database.queryOne("SELECT COUNT(*) FROM NotificationLog WHERE device_id = \(device) AND LOWER(HEX(id)) IN (\(list: ids))")
            let count: Int64? = try? row.map { row throws in try row.decode(Int64.self) }
            return count == Int64(total)
        }
        #expect(written, "every acknowledged notification's log row is written")
        #expect(waitForAccepted(Set(ids), within: 60))
    }

    @Test func everythingIsDeliveredAfterAPNsComesBack() throws {
        try TestStack.stack("sim-stop")
        defer { _ = try? TestStack.stack("sim-start") }
        let batch = (0..<50).map { _ in Self.notification(token: TestSecrets.apnsToken()) }
        for notification in batch { #expect(try client.submit(notification) == .accepted) }
        // APNs unreachable for 10 s: the first retries of each notification (1, 2, 4 s
        // apart, with jitter) fail. The 30 s cap on that backoff is DeliveryPolicy's unit
        // tests' to check, not worth a minute of every run here.
        Thread.sleep(forTimeInterval: 10)
        try TestStack.stack("sim-start")
        #expect(waitForAccepted(Set(batch.map(\.id)), within: 60))
    }
}
