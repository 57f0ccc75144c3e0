// libFuzzer target: what the Dovecot backend reads from outside (MailBackends/Dovecot).
//
// DovecotEvent(body:) over the body, and MIMEHeader.decode over the raw bytes as a
// header: thrown errors are normal; a trap is a finding. Also checks the bounds the
// hook promises: a decoded From or Subject is never longer than its limit. And
// discovery's two readers: the bytes as a DNS reply (its id taken from the first two
// bytes, so the reader gets past the header) and as an autoconfig file.
import Codecs
@testable import MailBackends
import POSIX
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    if let event = try? DovecotEvent(body: bytes) {
        precondition(event.subject.utf8.count <= DovecotEvent.textLimit, "a subject over its limit")
        precondition(event.senderName.utf8.count <= DovecotEvent.textLimit, "a sender over its limit")
        precondition(event.itemID == "\(event.uidValidity).\(event.uid)", "an item id that is not the message's")
    }
    let header = String(decoding: bytes, as: UTF8.self)
    for limit in [8, 64, 256] {
        precondition(MIMEHeader.decode(header, limit: limit).utf8.count <= limit, "a header decoded over its limit")
    }
    _ = DovecotHook.basicCredentials(header)
    let id = bytes.count >= 2 ? UInt16(bytes[0]) << 8 | UInt16(bytes[1]) : 0
    if let records = try? DNSMessage.srvAnswers(bytes, id: id, name: "_imaps._tcp.hosted.test") {
        precondition(records.count <= bytes.count / 16, "more SRV records than the reply can hold")
    }
    for server in DovecotDiscovery.incomingIMAPServers(autoconfig: bytes, domain: "hosted.test") {
        precondition((1...65535).contains(server.port), "a port outside 1-65535")
    }
    return 0
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_dovecot_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
