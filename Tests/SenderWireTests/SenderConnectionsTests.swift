import ENSTestSupport
import Foundation
import Glibc
import POSIX
import Testing
@testable import ENSModel
@testable import SenderWire

/// The responder side of the hand-off against a stand-in sender that speaks the frame
/// protocol strictly and can hang up when told to: what a kept connection does when the
/// sender closes it, answers short, or is not reused. (IngestTests runs kept connections
/// against the real intake.)
@Suite struct SenderConnectionsTests {
    /// A sender on a real Unix socket: one thread, one connection at a time; answers
    /// each submit frame `accepted`, and after `answersPerConnection` answers on a
    /// connection hangs up (nil: never).
    final class StandInSender: @unchecked Sendable {
        let path: String
        let listener: Int32
        let answersPerConnection: Int?
        let accepts = SynchronizedBox(0)
        let framesReceived = SynchronizedBox(0)
        private var thread: OSThread?

        init(path: String, answersPerConnection: Int?) throws {
            self.path = path
            self.answersPerConnection = answersPerConnection
            listener = try UnixSocket.listen(path: path, mode: 0o600, backlog: 8).fd
            thread = try OSThread.start { [self] in serve() }
        }

        private func serve() {
            while true {
                let fd = accept(listener, nil, nil)
                if fd < 0 { return }  // the listener was shut down: the test is over
                accepts.withLock { $0 += 1 }
                var decoder = FrameDecoder()
                var answered = 0
                reading: while true {
                    guard let bytes = try? FileDescriptor.read(fd), !bytes.isEmpty else { break }
                    decoder.append(bytes)
                    while let frame = try? decoder.next() {
                        precondition(frame.kind == .submit, "the responder sent a frame that is not a submission")
                        framesReceived.withLock { $0 += 1 }
                        try? FileDescriptor.writeAll(fd, Frame(kind: .accepted, payload: []).encoded)
                        answered += 1
                        if let limit = answersPerConnection, answered >= limit { break reading }
                    }
                }
                FileDescriptor.close(fd)
            }
        }

        func stop() {
            shutdown(listener, Int32(SHUT_RDWR))
            thread?.join()
            FileDescriptor.close(listener)
        }
    }

    static func withSender(answersPerConnection: Int?, _ body: (StandInSender) throws -> Void) throws {
        try withTemporaryDirectory { url in
            let sender = try StandInSender(path: url.path + "/apns.sock", answersPerConnection: answersPerConnection)
            defer { sender.stop() }
            try body(sender)
        }
    }

    @Test func oneKeptConnectionServesEveryHandOff() throws {
        try Self.withSender(answersPerConnection: nil) { sender in
            let connections = SenderConnections(kept: 2)
            let client = SenderClient(socketPath: sender.path, connections: connections)
            for notification in try (0..<10).map({ _ in try PushNotificationTests.alert() }) { #expect(try client.submit(notification) == .accepted) }
            #expect(sender.accepts.withLock { $0 } == 1)
            #expect(sender.framesReceived.withLock { $0 } == 10)
            #expect(connections.idleCount == 1)
        }
    }

    @Test func withoutKeptConnectionsEachHandOffConnects() throws {
        try Self.withSender(answersPerConnection: nil) { sender in
            let client = SenderClient(socketPath: sender.path)
            for notification in try (0..<3).map({ _ in try PushNotificationTests.alert() }) { #expect(try client.submit(notification) == .accepted) }
            #expect(sender.accepts.withLock { $0 } == 3)
        }
    }

    /// The sender hangs up after each answer (a restart, its idle sweep): the kept
    /// connection is seen closed before anything is written on it, and a new one carries
    /// the notification, which reaches the sender exactly once.
    @Test func aKeptConnectionTheSenderClosedIsReplacedAndNothingIsSentTwice() throws {
        try Self.withSender(answersPerConnection: 1) { sender in
            let connections = SenderConnections(kept: 2)
            let client = SenderClient(socketPath: sender.path, connections: connections)
            for index in 0..<5 {
                let notification = try PushNotificationTests.alert()
                #expect(try client.submit(notification) == .accepted)
                // Let the sender's hang-up arrive before the next hand-off looks.
                let deadline = MonotonicClock.milliseconds() + 2000
                while sender.accepts.withLock({ $0 }) == index && MonotonicClock.milliseconds() < deadline { sleepMilliseconds(1) }
                sleepMilliseconds(5)
            }
            #expect(sender.accepts.withLock { $0 } == 5)
            #expect(sender.framesReceived.withLock { $0 } == 5)
        }
    }

    /// A batch answered only in part (the sender hung up after the first): the caller
    /// learns how many were taken, and that connection is not kept.
    @Test func aShortAnswerIsReportedAndTheConnectionIsNotKept() throws {
        try Self.withSender(answersPerConnection: 1) { sender in
            let connections = SenderConnections(kept: 2)
            let client = SenderClient(socketPath: sender.path, connections: connections)
            let batch = [try PushNotificationTests.alert(), try PushNotificationTests.background()]
            let outcomes = try client.submit(batch: batch)
            #expect(outcomes == [.accepted])
            #expect(connections.idleCount == 0)
        }
    }

    @Test func anIdleConnectionPastItsReuseWindowIsClosedNotUsed() throws {
        try Self.withSender(answersPerConnection: nil) { sender in
            let connections = SenderConnections(kept: 2, reuseMilliseconds: 0)
            let client = SenderClient(socketPath: sender.path, connections: connections)
            for notification in try (0..<3).map({ _ in try PushNotificationTests.alert() }) { #expect(try client.submit(notification) == .accepted) }
            #expect(sender.accepts.withLock { $0 } == 3)
            #expect(connections.idleCount == 1)  // the last one, until the next hand-off finds it stale
        }
    }

    @Test func noMoreThanKeptWaitIdleAndTheRestAreClosed() throws {
        let connections = SenderConnections(kept: 2)
        var pairs: [[Int32]] = []
        for _ in 0..<3 {
            var fds: [Int32] = [0, 0]
            #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
            pairs.append(fds)
            connections.give(fds[0], path: "/run/ens/apns.sock")
        }
        #expect(connections.idleCount == 2)
        #expect(fcntl(pairs[0][0], F_GETFD) >= 0)
        #expect(fcntl(pairs[1][0], F_GETFD) >= 0)
        #expect(fcntl(pairs[2][0], F_GETFD) == -1)  // closed: two were kept already
        // A connection to another socket (a reload changed callbacks.push_socket) is not used.
        #expect(connections.take(path: "/run/ens/other.sock") == nil)
        #expect(connections.idleCount == 0)
        for pair in pairs { FileDescriptor.close(pair[1]) }
    }
}
