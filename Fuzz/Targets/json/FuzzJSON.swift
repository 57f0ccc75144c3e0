// libFuzzer target: JSON request bodies and sealed plaintexts.
//
// JSONParser.parse and ParameterDecoder.decode(json: true). Thrown errors are normal; a
// trap is a finding. Also checks that a parsed value's canonical encoding (the one
// PushNotification and the spool use) parses back to the same value.
import ENSModel
@testable import ENSResponder
import FuzzSupport
import SenderWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: start, count: count))
    _ = try? ParameterDecoder.decode(body, json: true)
    guard let value = try? JSONParser.parse(body) else { return 0 }
    _ = value.scalarText
    let encoded = value.encoded
    let again: JSONValue
    do {
        again = try JSONParser.parse(encoded)
    } catch {
        preconditionFailure("the encoding of a parsed value does not parse: \(error)")
    }
    precondition(again == value, "JSON round trip changed the value")
    precondition(again.encoded == encoded, "JSON encoding is not canonical")
    return 0
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_json_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
