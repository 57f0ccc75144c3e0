// libFuzzer target: base64 as request parameters (lenient) and callback URLs
// (URL-safe) carry it.
//
// Base64.decodeLenient and Base64.decodeURLSafe on the input as text; round trips
// through the encoders for what decodes, and for the raw input bytes.
import Codecs
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    let text = String(decoding: bytes, as: UTF8.self)
    if let decoded = Base64.decodeLenient(text) {
        precondition(Base64.decodeLenient(Base64.encode(decoded)) == decoded, "lenient base64 round trip failed")
    }
    if let decoded = Base64.decodeURLSafe(text) {
        precondition(Base64.decodeURLSafe(Base64.encodeURLSafe(decoded)) == decoded, "URL-safe base64 round trip failed")
    }
    precondition(Base64.decodeLenient(Base64.encode(bytes)) == bytes, "encode/decodeLenient lost bytes")
    precondition(Base64.decodeURLSafe(Base64.encodeURLSafe(bytes)) == bytes, "encodeURLSafe/decodeURLSafe lost bytes")
    return 0
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_base64_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
