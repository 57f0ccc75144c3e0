import ENSTestSupport
import Foundation
import Logging
import OpenSSL
import POSIX
import Testing
@testable import ENSMetrics
@testable import ENSModel
@testable import SenderWire
@testable import ENSSender
@testable import MailBackends

/// ens-sender's intake on its own: a real Unix socket, a real spool, no APNs.
@Suite struct IngestTests {
    /// Keeps every message logged through it.
    struct CollectingLogHandler: LogHandler {
        let messages: SynchronizedBox<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            messages.withLock { $0.append(event.message.description) }
        }
    }

    struct Running {
        let client: SenderClient
        let ingest: Ingest
        let socketPath: String
        let spool: Spool
        let handedOff: SynchronizedBox<[SpoolEntry]>
        /// What was handed off with each entry: delivery's copy, not read back from disk.
        let handedOffNotifications: SynchronizedBox<[PushNotification]>
        let messages: SynchronizedBox<[String]>
    }

    static func withIngest(capacity: Int, _ body: (Running) throws -> Void) throws {
        try withTemporaryDirectory { url in
            let socketPath = url.path + "/apns.sock"
            let listener = try UnixSocket.listen(path: socketPath, mode: 0o600, backlog: 16)
            defer { FileDescriptor.close(listener.fd) }
            let spool = try Spool(directory: url.path + "/spool", masterKey: try AESGCMKey.random(), capacity: capacity)
            let handedOff = SynchronizedBox<[SpoolEntry]>([])
            let handedOffNotifications = SynchronizedBox<[PushNotification]>([])
            let messages = SynchronizedBox<[String]>([])
            let logger = Logger(label: "ingest-tests") { _ in CollectingLogHandler(messages: messages) }
            let ingest = try Ingest(listener: listener.fd, spool: spool, metrics: MetricsRecorder(file: nil), logger: logger) { spooled in
                handedOff.withLock { $0 += spooled.map(\.entry) }
                handedOffNotifications.withLock { $0 += spooled.map(\.notification) }
            }
            let thread = try OSThread.start { ingest.run() }
            defer {
                ingest.stop()
                thread.join()
            }
            try body(Running(client: SenderClient(socketPath: socketPath), ingest: ingest, socketPath: socketPath, spool: spool, handedOff: handedOff,
                             handedOffNotifications: handedOffNotifications, messages: messages))
        }
    }

    @Test func acceptedMeansSpooledAndHandedOffInArrivalOrder() throws {
        try Self.withIngest(capacity: 100) { running in
            let notifications = try (0..<5).map { try SpoolTests.notification($0) }
            for notification in notifications {
                #expect(try running.client.submit(notification) == .accepted)
            }
            // Handed to delivery before the answer was sent.
            let entries = running.handedOff.withLock { $0 }
            #expect(try entries.map { try running.spool.load($0) } == notifications)
            #expect(running.handedOffNotifications.withLock { $0 } == notifications)
            #expect(running.spool.pending() == entries)
        }
    }

    @Test func aFullSpoolRefusesAndSaysSoOnce() throws {
        try Self.withIngest(capacity: 2) { running in
            var outcomes: [SenderClient.Outcome] = []
            for index in 0..<10 { outcomes.append(try running.client.submit(try SpoolTests.notification(index))) }
            #expect(outcomes == [.accepted, .accepted] + Array(repeating: .refused("spool-full"), count: 8))
            #expect(running.handedOff.withLock { $0.count } == 2)
            // The warning is written at the end of a turn: wait for that turn to finish.
            let deadline = MonotonicClock.milliseconds() + 5000
            while running.messages.withLock({ $0.isEmpty }) && MonotonicClock.milliseconds() < deadline { sleepMilliseconds(10) }
            sleepMilliseconds(100)
            #expect(running.messages.withLock { $0 } == ["spool full; refusing notifications"])
        }
    }

    /// A responder's kept connection carries every hand-off the intake accepts, one
    /// connection for all of them, and each is spooled once.
    @Test func aKeptConnectionCarriesEveryHandOff() throws {
        try Self.withIngest(capacity: 100) { running in
            let connections = SenderConnections(kept: 2)
            let client = SenderClient(socketPath: running.socketPath, connections: connections)
            let notifications = try (0..<20).map { try SpoolTests.notification($0) }
            for notification in notifications {
                #expect(try client.submit(notification) == .accepted)
            }
            let batch = try [20, 21].map { try SpoolTests.notification($0) }
            #expect(try client.submit(batch: batch) == [.accepted, .accepted])
            #expect(running.ingest.connectionsAccepted == 1)
            #expect(connections.idleCount == 1)
            let expected = try (0..<22).map { try SpoolTests.notification($0).id }
            #expect(running.handedOffNotifications.withLock { $0 }.map(\.id) == expected)
            // Without kept connections, each hand-off is a connection of its own.
            for notification in try (22..<25).map({ try SpoolTests.notification($0) }) {
                #expect(try running.client.submit(notification) == .accepted)
            }
            #expect(running.ingest.connectionsAccepted == 4)
        }
    }
}
