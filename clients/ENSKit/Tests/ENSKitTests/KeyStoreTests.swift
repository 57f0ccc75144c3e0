import Foundation
import Testing
@testable import ENSKit

struct KeyStoreTests {
    /// The file store keeps items across instances, owner-only, and deletes with nil.
    @Test func fileStoreRoundTrips() throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("enskit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let item = ENSKeyStoreItem.deviceSecret("ens.example.test", String(repeating: "a", count: 64))
        let store = try FileKeyStore(directory: directory)
        #expect(try store.data(for: item) == nil)
        try store.set(Data("first".utf8), for: item)
        try store.set(Data("second".utf8), for: item)
        #expect(try FileKeyStore(directory: directory).data(for: item) == Data("second".utf8))
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(files.count == 1)
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(try #require(files.first)).path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        try store.set(nil, for: item)
        #expect(try store.data(for: item) == nil)
    }

    /// A directory that was there already and others may enter is refused, not used.
    @Test func aDirectoryOthersMayEnterIsRefused() throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("enskit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        #expect(throws: ENSKeyStoreError.self) { try FileKeyStore(directory: directory) }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.path)
        _ = try FileKeyStore(directory: directory)
    }
}
