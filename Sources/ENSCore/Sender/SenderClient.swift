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
        let fd: Int32
        do {
            fd = try UnixSocket.connect(path: socketPath)
        } catch {
            throw Failure(problem: "\(error)")
        }
        defer { FileDescriptor.close(fd) }
        FileDescriptor.setTimeouts(fd, milliseconds: timeoutMilliseconds)
        do {
            try FileDescriptor.writeAll(fd, Frame(kind: .submit, payload: notification.json).encoded)
            var decoder = FrameDecoder()
            while true {
                let bytes = try FileDescriptor.read(fd)
                if bytes.isEmpty { throw Failure(problem: "connection closed before an answer") }
                decoder.append(bytes)
                if let frame = try decoder.next() {
                    switch frame.kind {
                    case .accepted: return .accepted
                    case .refused: return .refused(String(decoding: frame.payload, as: UTF8.self))
                    case .submit: throw Failure(problem: "unexpected frame from the sender")
                    }
                }
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(problem: "\(error)")
        }
    }
}
