internal import POSIX

/// A responder's connection to ens-apns: hands over one notification and waits until
/// the sender says it is durably spooled (or refuses it). One connection per call keeps
/// responders free of connection state; the socket is local and the call rare.
public struct SenderClient: Sendable {
    public enum Outcome: Sendable, Equatable {
        case accepted
        /// The sender refused it (`spool-full`, `bad-notification`, ...): nothing was kept.
        case refused(String)
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let problem: String
        public var description: String { "ens-apns unreachable: \(problem)" }
    }

    public let socketPath: String
    public let timeoutMilliseconds: Int

    public init(socketPath: String, timeoutMilliseconds: Int = 5000) {
        self.socketPath = socketPath
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    public func submit(_ notification: PushNotification) throws(Failure) -> Outcome {
        guard let outcome = try submit(batch: [notification]).first else { throw Failure(problem: "connection closed before an answer") }
        return outcome
    }

    /// Hands over several notifications on one connection, all frames at once, and reads
    /// their answers, which come in the same order (`ens-apns drain`: one sync on the
    /// sender's side covers the lot). Fewer answers than notifications: the sender hung
    /// up after the ones given (it was busy, say); the rest were not taken. Throws only
    /// when there is no answer at all.
    public func submit(batch notifications: [PushNotification]) throws(Failure) -> [Outcome] {
        let fd: Int32
        do {
            fd = try UnixSocket.connect(path: socketPath)
        } catch {
            throw Failure(problem: "\(error)")
        }
        defer { FileDescriptor.close(fd) }
        FileDescriptor.setTimeouts(fd, milliseconds: timeoutMilliseconds)
        var problem: String?
        do {
            try FileDescriptor.writeAll(fd, notifications.flatMap { Frame(kind: .submit, payload: $0.json).encoded })
        } catch {
            problem = "\(error)"  // the sender may have answered (busy) and hung up: read what it said
        }
        var outcomes: [Outcome] = []
        var decoder = FrameDecoder()
        do {
            reading: while outcomes.count < notifications.count {
                let bytes = try FileDescriptor.read(fd)
                if bytes.isEmpty { break }
                decoder.append(bytes)
                while let frame = try decoder.next() {
                    switch frame.kind {
                    case .accepted: outcomes.append(.accepted)
                    case .refused: outcomes.append(.refused(String(decoding: frame.payload, as: UTF8.self)))
                    case .submit:
                        problem = "unexpected frame from the sender"
                        break reading
                    }
                }
            }
        } catch {
            problem = problem ?? "\(error)"
        }
        guard !outcomes.isEmpty else { throw Failure(problem: problem ?? "connection closed before an answer") }
        return outcomes
    }
}
