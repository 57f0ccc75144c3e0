import ENSTestSupport
import OpenSSL
import Testing
@testable import ENSVault

/// The routing token a Dovecot account's METADATA carries: it opens for the server it
/// was issued for and no other, survives no edit, and fits what Dovecot and libcurl carry.
@Suite struct DovecotRouteTests {
    @Test(arguments: [nil, 0, 0x7ff, 4095])
    func aTokenOpensForItsServer(bucket: Int?) throws {
        let vault = try VaultTests.vault()
        let token = try DovecotRoute(recordID: 42, generation: 7, bucket: bucket).token(server: "hosting1", vault: vault)
        #expect(token.hasPrefix(bucket == nil ? "d1." : "d2.") && token.utf8.count == (bucket == nil ? 62 : 65))
        #expect(token.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || [0x2D, 0x2E, 0x5F].contains($0) })
        #expect(DovecotRoute(token: token, server: "hosting1", vault: vault) == DovecotRoute(recordID: 42, generation: 7, bucket: bucket))
        // Another server's name, another master key, another prefix: nothing.
        #expect(DovecotRoute(token: token, server: "hosting2", vault: vault) == nil)
        #expect(DovecotRoute(token: token, server: "hosting1", vault: try Self.otherVault()) == nil)
        #expect(DovecotRoute(token: (bucket == nil ? "d2." : "d1.") + token.dropFirst(3), server: "hosting1", vault: vault) == nil)
        // Two tokens for the same registration differ (a fresh nonce): a token says nothing.
        #expect(try DovecotRoute(recordID: 42, generation: 7, bucket: bucket).token(server: "hosting1", vault: vault) != token)
    }

    @Test func anEditedTokenOpensForNoOne() throws {
        let vault = try VaultTests.vault()
        let token = Array(try DovecotRoute(recordID: 1, generation: 1).token(server: "s", vault: vault))
        for index in token.indices.dropFirst(3) {
            var altered = token
            altered[index] = altered[index] == "A" ? "B" : "A"
            #expect(DovecotRoute(token: String(altered), server: "s", vault: vault) == nil, "altered at \(index)")
        }
        for garbage in ["", "d1.", "d1.!!!", "r2." + String(token.dropFirst(3)), String(repeating: "A", count: 500)] {
            #expect(DovecotRoute(token: garbage, server: "s", vault: vault) == nil)
        }
    }

    /// The hook credential: derived, so `config` prints it again; a new serial retires it.
    @Test func theHookCredentialIsDerivedPerServerAndSerial() throws {
        let vault = try VaultTests.vault()
        let first = vault.dovecotCredential(server: "hosting1", serial: 1)
        #expect(first == vault.dovecotCredential(server: "hosting1", serial: 1) && first.utf8.count == 43)
        #expect(first != vault.dovecotCredential(server: "hosting1", serial: 2))
        #expect(first != vault.dovecotCredential(server: "hosting2", serial: 1))
        #expect(first != (try Self.otherVault()).dovecotCredential(server: "hosting1", serial: 1))
    }

    /// A vault under another master key.
    static func otherVault() throws -> Vault {
        Vault(masterKey: try AESGCMKey(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) }))
    }
}
