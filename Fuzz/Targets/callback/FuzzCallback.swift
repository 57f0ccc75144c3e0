// libFuzzer target: Exchange callback URLs (`/ews/k2.<box>`, and the older
// `/ews/<record>/<generation>/<blob>`) and the payload they seal.
//
// The first input byte picks the mode:
//   even ("0"): the rest is the path suffix, read by CallbackToken(path:vault:) under a
//         fixed master key (forged or malformed URLs, sealed, keyed or carrying, must
//         be refused, not trap);
//   odd ("1"):  the rest is a callback payload: CallbackPayload(encoded:) must not trap,
//         and a payload that decodes is sealed into a carrying URL and under a sealed
//         and a keyed URL's seal, read back and opened, and must come back unchanged.
// The committed seeds include URLs made under the same fixed key, so the fuzzer starts
// from tokens whose MAC verifies.
import ENSModel
import ENSVault
import EWS
import Glibc
import OpenSSL
import FuzzSupport

private let vault: Vault = {
    guard let key = try? AESGCMKey(bytes: (0..<32).map { UInt8($0 &* 7 &+ 1) }) else { preconditionFailure("AESGCMKey refused 32 bytes") }
    return Vault(masterKey: key)
}()
private let recordKeyMaterial: [UInt8] = Array("fuzz record key material".utf8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    guard let mode = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    if mode & 1 == 0 {
        let suffix = String(decoding: rest, as: UTF8.self)
        if let token = CallbackToken(path: suffix, vault: vault) {
            precondition(token.recordID >= 0 && token.generation >= 0, "a negative record id or generation")
            if let opened = try? token.openCarried(recordKeyMaterial: recordKeyMaterial, vault: vault) {
                _ = try? CallbackPayload(encoded: opened)
            }
            _ = try? token.credentialSeal(vault: vault)?.open(rest)
        }
        return 0
    }
    guard let payload = try? CallbackPayload(encoded: rest) else { return 0 }
    // Normalise once (a field the method does not use is dropped), then the encoding
    // must be stable and survive sealing.
    let encoded = payload.encoded
    guard encoded.count < 3000 else { return 0 }
    let normal: CallbackPayload
    do {
        normal = try CallbackPayload(encoded: encoded)
    } catch {
        preconditionFailure("a payload's own encoding is refused: \(error)")
    }
    precondition(normal.encoded == encoded, "callback payload encoding is not stable")
    let recordID = Int64(mode >> 1)
    do {
        let path = try CallbackToken.makeCarrying(payload: encoded, recordID: recordID, generation: 3,
                                                  recordKeyMaterial: recordKeyMaterial, vault: vault)
        guard let token = CallbackToken(path: path, vault: vault) else { preconditionFailure("a token made here is refused") }
        precondition(token.recordID == recordID && token.generation == 3, "token ids changed")
        guard let opened = try token.openCarried(recordKeyMaterial: recordKeyMaterial,
                                                 vault: vault) else { preconditionFailure("a carrying token carries nothing") }
        precondition(opened == encoded, "the sealed payload changed")
        let decoded = try CallbackPayload(encoded: opened)
        precondition(decoded == normal, "the opened payload decodes differently")
        let foreign = try? token.openCarried(recordKeyMaterial: Array("other".utf8), vault: vault)
        precondition(foreign == nil, "a token opened with another record's key material")
        let (keyedPath, seal) = try CallbackToken.makeKeyed(recordID: recordID, generation: 3, vault: vault)
        guard let keyed = CallbackToken(path: keyedPath, vault: vault), let reopened = try keyed.credentialSeal(vault: vault) else {
            preconditionFailure("a keyed token made here is refused")
        }
        let stored = try reopened.open(seal.seal(encoded))
        precondition(stored == encoded, "stored credentials changed")
        let (sealedPath, sealedSeal) = try CallbackToken.makeSealed(recordID: recordID, generation: 3, vault: vault)
        guard let sealed = CallbackToken(path: sealedPath, vault: vault), sealed.recordID == recordID, sealed.generation == 3,
              let sealedReopened = try sealed.credentialSeal(vault: vault) else {
            preconditionFailure("a sealed token made here is refused")
        }
        let sealedStored = try sealedReopened.open(sealedSeal.seal(encoded))
        precondition(sealedStored == encoded, "stored credentials changed (sealed URL)")
    } catch {
        preconditionFailure("sealing a callback payload failed: \(error)")
    }
    return 0
}

/// `ENS_FUZZ_WRITE_SEEDS=DIR fuzz-callback` writes valid callback URLs (mode
/// byte "0" + path suffix) and payloads ("1" + payload) into DIR, then exits: how
/// corpus/callback/ got its seeds.
@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: UnsafeMutablePointer<CInt>,
                       _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> CInt {
    guard let directory = getenv("ENS_FUZZ_WRITE_SEEDS").map({ String(cString: $0) }) else { return 0 }
    let payloads: [(String, CallbackPayload)] = [
        ("basic", CallbackPayload(credentials: EWSCredentials(method: .basic(userName: "alice@example.test", password: "pa:ss"), mailbox: nil))),
        ("oauth",
         CallbackPayload(credentials: EWSCredentials(method: .oauth(accessToken: "eyJ0eXAiOiJKV1QifQ.e30.sig"), mailbox: "alice@example.test"))),
        ("oauth-refresh", CallbackPayload(credentials: EWSCredentials(
            method: .oauth(accessToken: "eyJ0eXAiOiJKV1QifQ.e30.sig"), mailbox: "alice@example.test",
            refresh: OAuthRefresh(refreshToken: "rt.seed", tokenEndpoint: "https://login.example.test/common/oauth2/v2.0/token", clientID: "app",
                                  scope: "offline_access", accessTokenExpiresAt: Timestamp(millisecondsSinceEpoch: 1_800_000_000_000))))),
        ("certificate", CallbackPayload(credentials: EWSCredentials(
            method: .certificate(ClientIdentity(certificateDER: [0x30, 0x03, 0x02, 0x01, 0x01], privateKeyDER: [0x30, 0x00])),
            mailbox: nil))),
    ]
    for (index, (name, payload)) in payloads.enumerated() {
        guard let path = try? CallbackToken.makeCarrying(payload: payload.encoded, recordID: Int64(index + 1),
            generation: Int64(index), recordKeyMaterial: recordKeyMaterial, vault: vault) else { continue }
        write(directory + "/token-" + name, Array("0".utf8) + Array(path.utf8))
        if let (sealed, _) = try? CallbackToken.makeSealed(recordID: Int64(index + 1), generation: Int64(index), vault: vault) {
            write(directory + "/token-sealed-" + name, Array("0".utf8) + Array(sealed.utf8))
        }
        write(directory + "/payload-" + name, Array("1".utf8) + payload.encoded)
    }
    exit(0)
}

private func write(_ path: String, _ bytes: [UInt8]) {
    guard let file = fopen(path, "wb") else { return }
    _ = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, file) }
    fclose(file)
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_callback_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
