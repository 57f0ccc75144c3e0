import ENSTestSupport
import Testing
@testable import ENSVault

/// Callback URLs made with a shard map name the user's bucket inside the sealed token
/// (`k3.`, `r3.`, `b3.`); every older form still opens, naming no bucket (shard 0).
@Suite struct BucketTokenTests {
    @Test(arguments: [0, 1, 0x7ff, 0xa3f, 4095])
    func exchangeURLsCarryTheirBucket(bucket: Int) throws {
        let vault = try VaultTests.vault()
        let (suffix, seal) = try CallbackToken.makeSealed(recordID: 42, generation: 3, bucket: bucket, vault: vault)
        #expect(suffix.hasPrefix("k3.") && !suffix.contains("/"))
        #expect(("https://ens.example.com/ews/" + suffix).utf8.count < 140)
        let token = try #require(CallbackToken(path: suffix, vault: vault))
        #expect(token.recordID == 42 && token.generation == 3 && token.bucket == bucket)
        let sealed = try seal.seal(Array("the credentials".utf8))
        #expect(try token.credentialSeal(vault: vault)?.open(sealed) == Array("the credentials".utf8))
    }

    @Test func aBucketURLOpensOnlyAsItself() throws {
        let vault = try VaultTests.vault()
        let (withBucket, _) = try CallbackToken.makeSealed(recordID: 42, generation: 3, bucket: 0x123, vault: vault)
        let (without, _) = try CallbackToken.makeSealed(recordID: 42, generation: 3, vault: vault)
        #expect(CallbackToken(path: "k2." + withBucket.dropFirst(3), vault: vault) == nil, "a k3 box is no k2 box")
        #expect(CallbackToken(path: "k3." + without.dropFirst(3), vault: vault) == nil, "nor the other way round")
        let characters = Array(withBucket)
        for index in characters.indices.dropFirst(3) {
            var altered = characters
            altered[index] = altered[index] == "A" ? "B" : "A"
            #expect(CallbackToken(path: String(altered), vault: vault) == nil, "altered at \(index)")
        }
        #expect(CallbackToken(path: withBucket, vault: try VaultTests.vault(VaultTests.otherMasterBytes)) == nil)
        let route = RoutingToken(recordID: 42, generation: 3, bucket: 0x123).path(vault: vault)
        #expect(CallbackToken(path: "k3." + route.dropFirst(3), vault: vault) == nil, "a Graph route is no Exchange URL")
    }

    /// URLs made before sharding keep working, and route to shard 0 (no bucket).
    @Test func olderExchangeFormsOpenWithoutABucket() throws {
        let vault = try VaultTests.vault()
        let (sealed, _) = try CallbackToken.makeSealed(recordID: 42, generation: 3, vault: vault)
        #expect(sealed.hasPrefix("k2."))
        let (keyed, _) = try CallbackToken.makeKeyed(recordID: 42, generation: 3, vault: vault)
        let (carrying, _) = try CallbackTokenTests.make(vault: vault)
        for suffix in [sealed, keyed, carrying] {
            let token = try #require(CallbackToken(path: suffix, vault: vault), "\(suffix.prefix(6))")
            #expect(token.recordID == 42 && token.generation == 3 && token.bucket == nil)
        }
    }

    @Test func graphRoutesCarryTheirBucket() throws {
        let vault = try VaultTests.vault()
        let own = RoutingToken(recordID: 42, generation: 7, bucket: 4095).path(vault: vault)
        #expect(own.hasPrefix("r3.") && own.utf8.count <= 3 + 64)
        #expect(RoutingToken(path: own, vault: vault) == RoutingToken(recordID: 42, generation: 7, bucket: 4095))
        let blind = try RoutingToken(recordID: 42, blindID: 9, bucket: 0).blindPath(vault: vault)
        #expect(blind.hasPrefix("b3."))
        #expect(RoutingToken(path: blind, vault: vault) == RoutingToken(recordID: 42, blindID: 9, bucket: 0))
        for (from, to) in [("r3.", "r2."), ("r3.", "b3."), ("b3.", "b2."), ("b3.", "r3.")] {
            let path = from == "r3." ? own : blind
            #expect(RoutingToken(path: to + path.dropFirst(3), vault: vault) == nil, "\(from) read as \(to)")
        }
        var characters = Array(own)
        characters[12] = characters[12] == "A" ? "B" : "A"
        #expect(RoutingToken(path: String(characters), vault: vault) == nil)
    }

    @Test func olderGraphFormsOpenWithoutABucket() throws {
        let vault = try VaultTests.vault()
        let sealed = RoutingToken(recordID: 42, generation: 7).path(vault: vault)
        let legacy = RoutingToken(recordID: 42, generation: 7).legacyPath(vault: vault)
        let blind = try RoutingToken(recordID: 42, blindID: 9).blindPath(vault: vault)
        #expect(sealed.hasPrefix("r2.") && blind.hasPrefix("b2."))
        for path in [sealed, legacy, blind] {
            let route = try #require(RoutingToken(path: path, vault: vault))
            #expect(route.recordID == 42 && route.bucket == nil)
        }
    }
}
