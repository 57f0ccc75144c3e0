import ENSTestSupport
import Codecs
import OpenSSL
import Testing
@testable import ENSModel
@testable import ENSVault

@Suite struct VaultTests {
    static let masterBytes: [UInt8] = (0..<32).map { UInt8(0xA0 &+ $0) }
    static let otherMasterBytes: [UInt8] = (0..<32).map { UInt8(0x10 &+ $0) }

    static func vault(_ bytes: [UInt8] = masterBytes) throws -> Vault {
        Vault(masterKey: try AESGCMKey(bytes: bytes))
    }

    static let tokenHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    static let userA = String(repeating: "a", count: 64)
    static let userB = String(repeating: "b", count: 64)

    // MARK: Device token hashes

    @Test func tokenHashIsStableForTheSameMasterKey() throws {
        let token = try #require(DeviceToken(hex: Self.tokenHex))
        let first = try Self.vault().tokenHash(token)
        let second = try Self.vault().tokenHash(token)  // a separate instance, as in another process
        #expect(first == second)
        #expect(first.count == 32)
    }

    @Test func tokenHashDiffersAcrossMasterKeysAndTokens() throws {
        let token = try #require(DeviceToken(hex: Self.tokenHex))
        #expect(try Self.vault().tokenHash(token) != Self.vault(Self.otherMasterBytes).tokenHash(token))
        let other = try #require(DeviceToken(hex: "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
        #expect(try Self.vault().tokenHash(token) != Self.vault().tokenHash(other))
    }

    @Test func tokenHashIgnoresHexCase() throws {
        let vault = try Self.vault()
        let lower = try #require(DeviceToken(hex: Self.tokenHex))
        let upper = try #require(DeviceToken(hex: Self.tokenHex.uppercased()))
        let mixed = try #require(DeviceToken(hex: "0123456789ABCDEF0123456789abcdef0123456789AbCdEf0123456789aBcDeF"))
        #expect(lower == upper && upper == mixed)
        #expect(vault.tokenHash(lower) == vault.tokenHash(upper))
        #expect(vault.tokenHash(lower) == vault.tokenHash(mixed))
    }

    @Test func tokenHashMatchesTheDocumentedDerivation() throws {
        // Stored hashes must survive a rewrite: HMAC-SHA-256 under
        // HMAC-SHA-256(master, "ens/v1/device-token-hash") of the lowercase hex, by Python.
        let program = """
            import hashlib, hmac, sys
            master = bytes.fromhex(sys.argv[1])
            key = hmac.new(master, b"ens/v1/device-token-hash", hashlib.sha256).digest()
            print(hmac.new(key, sys.argv[2].lower().encode(), hashlib.sha256).hexdigest())
            """
        let token = try #require(DeviceToken(hex: Self.tokenHex.uppercased()))
        let expected = try Shell.python(program, [Hex.encode(Self.masterBytes), Self.tokenHex.uppercased()])
        #expect(Hex.encode(try Self.vault().tokenHash(token)) == expected)
    }

    // MARK: Sealed values

    @Test func userKeyIsBoundToItsUser() throws {
        let vault = try Self.vault()
        let key = TestKeys.primary
        let sealed = try vault.sealUserKey(key, userID: Self.userA)
        let opened = try vault.openUserKey(sealed, userID: Self.userA)
        #expect(try opened.derRepresentation == key.derRepresentation)
        #expect(throws: (any Error).self) { try vault.openUserKey(sealed, userID: Self.userB) }
        #expect(throws: (any Error).self) { try vault.openUserKey(sealed, userID: Self.userA.uppercased()) }
        #expect(throws: (any Error).self) { try vault.openPoolKey(sealed) }
        #expect(throws: (any Error).self) { try Self.vault(Self.otherMasterBytes).openUserKey(sealed, userID: Self.userA) }
    }

    @Test func poolKeyIsNotAUserKey() throws {
        let vault = try Self.vault()
        let sealed = try vault.sealPoolKey(TestKeys.secondary)
        #expect(try vault.openPoolKey(sealed).derRepresentation == TestKeys.secondary.derRepresentation)
        #expect(throws: (any Error).self) { try vault.openUserKey(sealed, userID: Self.userA) }
        #expect(throws: (any Error).self) { try vault.openUserKey(sealed, userID: "pool") }
        #expect(throws: (any Error).self) { try vault.openUserKey(sealed, userID: "") }
    }

    @Test func sealedUserKeyMatchesTheDocumentedLayout() throws {
        // AES-256-GCM under HMAC-SHA-256(master, "ens/v1/private-key"), AAD "user:<id>",
        // nonce ‖ ciphertext ‖ tag, opened by Python: the at-rest format is pinned.
        let program = """
            import hashlib, hmac, sys
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            master, sealed = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])
            key = hmac.new(master, b"ens/v1/private-key", hashlib.sha256).digest()
            print(AESGCM(key).decrypt(sealed[:12], sealed[12:], ("user:" + sys.argv[3]).encode()).hex())
            """
        let sealed = try Self.vault().sealUserKey(TestKeys.primary, userID: Self.userA)
        let der = try Shell.python(program, [Hex.encode(Self.masterBytes), Hex.encode(sealed), Self.userA])
        #expect(der == Hex.encode(try TestKeys.primary.derRepresentation))
    }

    @Test func deviceTokenRoundTrip() throws {
        let vault = try Self.vault()
        let token = try #require(DeviceToken(hex: Self.tokenHex.uppercased()))
        let sealed = try vault.sealToken(token)
        #expect(try vault.openToken(sealed) == token)
        #expect(try vault.openToken(sealed)?.value == Self.tokenHex)
        #expect(throws: (any Error).self) { try Self.vault(Self.otherMasterBytes).openToken(sealed) }
        // Two seals of one token differ (fresh nonces), so sealed values do not reveal equality.
        #expect(try vault.sealToken(token) != sealed)
    }

    @Test func syncKeyIsBoundToItsTokenHash() throws {
        let vault = try Self.vault()
        let hashA = vault.tokenHash(try #require(DeviceToken(hex: Self.tokenHex)))
        let hashB = vault.tokenHash(try #require(DeviceToken(hex: String(repeating: "f", count: 64))))
        let sealed = try vault.sealSyncKey("sync-key-1", tokenHash: hashA)
        #expect(try vault.openSyncKey(sealed, tokenHash: hashA) == "sync-key-1")
        #expect(throws: (any Error).self) { try vault.openSyncKey(sealed, tokenHash: hashB) }
        #expect(throws: (any Error).self) { try vault.openSyncKey(sealed, tokenHash: []) }
    }

    @Test func purposesDoNotCrossOver() throws {
        // Each purpose has its own derived key: a value sealed for one never opens as another,
        // even with the associated data the other purpose would use.
        let vault = try Self.vault()
        let master = try AESGCMKey(bytes: Self.masterBytes)
        let token = try #require(DeviceToken(hex: Self.tokenHex))
        let sealedToken = try vault.sealToken(token)
        #expect(throws: (any Error).self) { try vault.openSyncKey(sealedToken, tokenHash: Array("device-token".utf8)) }
        #expect(throws: (any Error).self) { try master.open(sealedToken, associatedData: Array("device-token".utf8)) }

        let sealedSync = try vault.sealSyncKey(Self.tokenHex, tokenHash: Array("device-token".utf8))
        #expect(throws: (any Error).self) { try vault.openToken(sealedSync) }

        let sealedPool = try vault.sealPoolKey(TestKeys.primary)
        #expect(throws: (any Error).self) { try master.open(sealedPool, associatedData: Array("pool".utf8)) }
        #expect(throws: (any Error).self) {
            try master.derived(label: "ens/v1/device-token").open(sealedPool, associatedData: Array("pool".utf8))
        }
        #expect(throws: Never.self) {
            try master.derived(label: "ens/v1/private-key").open(sealedPool, associatedData: Array("pool".utf8))
        }
    }

    // MARK: DeviceToken

    @Test(arguments: [16, 18, 64, 100, 200])
    func validTokenLengths(length: Int) {
        #expect(DeviceToken(hex: String(repeating: "a", count: length))?.value == String(repeating: "a", count: length))
    }

    @Test(arguments: [
        "", "0", "00", String(repeating: "a", count: 14), String(repeating: "a", count: 15), String(repeating: "a", count: 17),
        String(repeating: "a", count: 199), String(repeating: "a", count: 201), String(repeating: "a", count: 202),
        String(repeating: "g", count: 64), String(repeating: "a", count: 63) + "z", String(repeating: "a", count: 62) + " a",
        " " + String(repeating: "a", count: 63), String(repeating: "a", count: 62) + "é", "<" + String(repeating: "a", count: 63) + ">",
        "<" + String(repeating: "a", count: 62), String(repeating: "a", count: 62) + ">", "<<" + String(repeating: "a", count: 62) + ">>",
        "0x" + String(repeating: "a", count: 62), String(repeating: "a", count: 62) + "\n\n", String(repeating: "Ａ", count: 32),
    ])
    func invalidTokensAreRefused(text: String) {
        #expect(DeviceToken(hex: text) == nil)
    }

    /// iOS's NSData.description form: angle brackets, groups of 8 hex digits, spaces.
    @Test func tokensInNSDataDescriptionFormAreTheSameToken() {
        let hex = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
        #expect(DeviceToken(hex: "<A1B2C3D4 E5F60718 293A4B5C 6D7E8F90 A1B2C3D4 E5F60718 293A4B5C 6D7E8F90>")?.value == hex)
        #expect(DeviceToken(hex: "<\(hex)>") == DeviceToken(hex: hex))
    }

    @Test func tokenHexIsLowercased() {
        #expect(DeviceToken(hex: "ABCDEF0123456789")?.value == "abcdef0123456789")
        #expect(DeviceToken(hex: "ABCDEF0123456789") == DeviceToken(hex: "abcdef0123456789"))
        #expect(Set([DeviceToken(hex: "ABCDEF0123456789")!, DeviceToken(hex: "abcdef0123456789")!]).count == 1)
    }
}
