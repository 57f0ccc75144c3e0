import ENSTestSupport
import Codecs
import Foundation
import OpenSSL
import Testing
@testable import ENSVault

/// The fresh-credentials box (ECIES to a subscription's P-256 key) and what a keyed
/// subscription stores: opened only by its own key, record and generation, never as a
/// preview; the stored private scalar is the key Python's `cryptography` derives the
/// same public point from.
@Suite struct CredentialBoxTests {
    @Test func aBoxOpensOnlyForItsSubscription() throws {
        let key = try P256KeyAgreementKey.generate()
        let credentials = Array("user:password".utf8)
        let box = try CredentialBox.seal(credentials, to: key.publicKey, recordID: 42, generation: 3)
        #expect(CredentialBox.open(box, with: key, recordID: 42, generation: 3) == credentials)
        #expect(CredentialBox.open(box, with: key, recordID: 43, generation: 3) == nil)
        #expect(CredentialBox.open(box, with: key, recordID: 42, generation: 4) == nil)
        #expect(CredentialBox.open(box, with: try P256KeyAgreementKey.generate(), recordID: 42, generation: 3) == nil)
        var altered = box
        altered[altered.count - 1] ^= 1
        #expect(CredentialBox.open(altered, with: key, recordID: 42, generation: 3) == nil)
        #expect(CredentialBox.open(Array(box.prefix(40)), with: key, recordID: 42, generation: 3) == nil)
        // Same construction, another purpose: a preview never opens as credentials.
        let id = String(repeating: "ab", count: 16)
        let preview = try PreviewEncryption.seal(credentials, to: key.publicKey, notificationID: id)
        #expect(CredentialBox.open(preview, with: key, recordID: 42, generation: 3) == nil)
    }

    @Test func storedCredentialsKeepTheBoxKey() throws {
        let key = try P256KeyAgreementKey.generate()
        let stored = try StoredCredentials(credentials: [1, 2, 3], boxKey: key)
        let read = try StoredCredentials(encoded: stored.encoded)
        #expect(read.credentials == [1, 2, 3])
        #expect(try read.boxKey().publicKey == key.publicKey)
        #expect(read.replacingCredentials(with: [4]).credentials == [4])
        #expect(try read.replacingCredentials(with: [4]).boxKey().publicKey == key.publicKey)
        #expect(throws: (any Error).self) { try StoredCredentials(encoded: [2] + Array(repeating: 1, count: 40)) }
        #expect(throws: (any Error).self) { try StoredCredentials(encoded: [1, 0]) }
        // The scalar, as Python's cryptography reads it, gives the same public point.
        let point = try Shell.python("""
            import sys
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.hazmat.primitives import serialization
            key = ec.derive_private_key(int(sys.argv[1], 16), ec.SECP256R1())
            print(key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint).hex())
            """, [Hex.encode(try key.rawPrivateKey)])
        #expect(point == Hex.encode(key.publicKey.x963))
    }
}
