// libFuzzer target: application/x-www-form-urlencoded request bodies.
//
// FormDecoder.decode, and ParameterDecoder.decode(json: false) (the responder's path
// from body bytes to parameters). Thrown errors are normal; a trap is a finding. Also
// checks that what decodes survives a round trip through a canonical re-encoding.
import ENSHTTP
import ENSModel
@testable import ENSResponder
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: start, count: count))
    _ = MediaType(body)
    guard let fields = try? FormDecoder.decode(body) else {
        _ = try? ParameterDecoder.decode(body, json: false)
        return 0
    }
    for (name, value) in fields {
        precondition(!name.isEmpty && !name.utf8.contains(0) && !value.utf8.contains(0), "form decoder let through an empty name or a NUL")
    }
    let parameters = try? ParameterDecoder.decode(body, json: false)
    precondition(parameters?.values == fields, "ParameterDecoder disagrees with FormDecoder")
    let again = try? FormDecoder.decode(encode(fields))
    precondition(again == fields, "form round trip changed the fields")
    return 0
}

/// Percent-encodes everything but unreserved ASCII.
private func encode(_ fields: [String: String]) -> [UInt8] {
    var out: [UInt8] = []
    for (index, (name, value)) in fields.enumerated() {
        if index > 0 { out.append(UInt8(ascii: "&")) }
        escape(name, into: &out)
        out.append(UInt8(ascii: "="))
        escape(value, into: &out)
    }
    return out
}

private func escape(_ text: String, into out: inout [UInt8]) {
    let hex = Array("0123456789ABCDEF".utf8)
    for byte in text.utf8 {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            out.append(byte)
        default:
            out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]]
        }
    }
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_form_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
