// libFuzzer target: sealed request parameters (base64 of RSA PKCS#1 v1.5 blocks).
//
// The first input byte picks the mode:
//   even ("0"): the rest is the parameter's text: SealedParameter.open under a fixed RSA key
//         (generated once per process), and the responder's SealedPayload.object/text
//         on top of it. Thrown errors are normal; a trap is a finding.
//   odd ("1"):  the rest is a decrypted block as the RSA operation could produce it:
//         SealedParameter.unpadType2, the constant-time padding check, must agree with
//         a plain reading of PKCS#1 v1.5 (EM = 00 02 PS(>= 8 non-zero) 00 M).
// Each RSA private-key operation costs about a millisecond, so the first mode runs a
// few hundred times a second; fuzz.sh caps this target's input length.
@testable import ENSVault
@testable import ENSResponder
import OpenSSL
import FuzzSupport

private let key: RSAPrivateKey = {
    guard let key = try? RSAPrivateKey.generate() else { preconditionFailure("RSA key generation failed") }
    return key
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    guard let mode = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    if mode & 1 == 1 {
        let (valid, start) = SealedParameter.unpadType2(rest)
        let expected = reference(rest)
        precondition(valid == (expected == nil ? 0 : 0xFF), "unpadType2 validity disagrees with the reference")
        if let expected { precondition(start == expected, "unpadType2 finds the message at the wrong offset") }
        return 0
    }
    let text = String(decoding: rest, as: UTF8.self)
    let (plaintext, valid) = SealedParameter.open(text, with: key)
    if !valid {
        precondition(!plaintext.isEmpty && plaintext.count <= SealedParameter.maximumBlocks * key.modulusByteCount, "stand-in of a bad length")
    }
    let payload = SealedPayload(key: key)
    _ = try? payload.object(text)
    _ = try? payload.text(text)
    return 0
}

/// PKCS#1 v1.5 type 2 unpadding, read straight from RFC 8017 §7.2.2: the offset of M,
/// or nil.
private func reference(_ em: [UInt8]) -> Int? {
    guard em.count >= 11, em[0] == 0, em[1] == 2, let separator = em[2...].firstIndex(of: 0), separator - 2 >= 8 else { return nil }
    return separator + 1
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_sealed_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
