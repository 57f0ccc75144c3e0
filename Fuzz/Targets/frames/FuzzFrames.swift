// libFuzzer target: the responder → ens-sender Unix-socket stream.
//
// The first input byte chooses how the rest is cut into socket reads (1–16 bytes at a
// time); each read goes to FrameDecoder.append, followed by next() until it needs
// more bytes or throws (the server then answers `refused` and closes). Every frame
// must re-encode to what was read, and every submit's payload goes to
// PushNotification(json:), whose own JSON must parse back to the same notification.
import SenderWire
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: start, count: count)
    guard let first = bytes.first else { return 0 }
    let chunk = Int(first & 15) + 1
    var decoder = FrameDecoder()
    var offset = 1
    reading: while offset < bytes.count {
        let end = min(offset + chunk, bytes.count)
        decoder.append(bytes[offset..<end])
        offset = end
        while true {
            let frame: Frame?
            do {
                frame = try decoder.next()
            } catch {
                _ = error.reason
                break reading
            }
            guard let frame else { break }
            check(frame)
        }
    }
    return 0
}

private func check(_ frame: Frame) {
    precondition(frame.payload.count <= Frame.maximumPayload, "an oversize frame was accepted")
    var again = FrameDecoder()
    again.append(frame.encoded)
    precondition((try? again.next()) == frame, "a frame does not survive re-encoding")
    guard frame.kind == .submit, let notification = try? PushNotification(json: frame.payload) else { return }
    precondition(notification.payload.count <= PushNotification.maximumPayload, "an oversize APNs payload was accepted")
    let reparsed: PushNotification
    do {
        reparsed = try PushNotification(json: notification.json)
    } catch {
        preconditionFailure("a notification's own JSON is refused: \(error)")
    }
    precondition(reparsed == notification, "a notification does not survive its JSON")
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_frames_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
