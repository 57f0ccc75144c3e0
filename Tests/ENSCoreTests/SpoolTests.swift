import Foundation
import OpenSSL
import Testing
@testable import ENSCore
@testable import ENSSender

@Suite struct SpoolTests {
    static let alertText = "Mail from Alice Liddell about the tea party"

    static func notification(_ index: Int, pushType: PushNotification.PushType = .alert) throws -> PushNotification {
        let hex = String(index, radix: 16)
        let payload = pushType == .alert
            ? #"{"aps":{"alert":{"body":"\#(alertText) #\#(index)"}}}"#
            : #"{"aps":{"content-available":1}}"#
        return PushNotification(
            id: String(repeating: "0", count: 32 - hex.count) + hex,
            deviceToken: try #require(DeviceToken(hex: "feedfacecafebeef00112233445566778899aabbccddeeff0011223344556677")),
            topic: "com.example.mail", environment: .production, pushType: pushType, expiration: 1_900_000_000 + Int64(index),
            payload: Array(payload.utf8), deviceRowID: Int64(index) + 1000)
    }

    static func list(_ directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
    }

    static func withSpool(capacity: Int = 1000, _ body: (Spool, String, AESGCMKey) throws -> Void) throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            try body(try Spool(directory: path, masterKey: key, capacity: capacity), path, key)
        }
    }

    // MARK: Storing and loading

    @Test func createsItsDirectories() throws {
        try Self.withSpool { spool, path, _ in
            #expect(try Self.list(path) == ["queue", "tmp"])
            #expect(spool.count == 0)
            #expect(try spool.pending() == [])
            let attributes = try FileManager.default.attributesOfItem(atPath: path + "/queue")
            #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o777 } == 0o700)
        }
    }

    @Test func storeLoadRoundTrip() throws {
        try Self.withSpool { spool, path, _ in
            let alert = try Self.notification(1)
            let background = try Self.notification(2, pushType: .background)
            let alertName = try spool.store(alert)
            let backgroundName = try spool.store(background)
            #expect(alertName.hasSuffix(alert.id))
            #expect(try spool.load(alertName) == alert)
            #expect(try spool.load(backgroundName) == background)
            #expect(spool.count == 2)
            #expect(try Self.list(path + "/queue") == [alertName, backgroundName])
            #expect(try Self.list(path + "/tmp") == [])
            // Loading does not consume.
            #expect(try spool.load(alertName) == alert)
            #expect(spool.count == 2)
        }
    }

    @Test func namesSortInArrivalOrder() throws {
        try Self.withSpool { spool, _, _ in
            // Ids in descending order, so sorting by id would give the wrong answer.
            var names: [String] = []
            for index in (0..<50).reversed() {
                names.append(try spool.store(try Self.notification(index)))
            }
            #expect(Set(names).count == 50)
            #expect(names.sorted() == names)
            #expect(try spool.pending() == names)
            #expect(spool.count == 50)
            for (offset, name) in names.enumerated() {
                #expect(try spool.load(name).id == (try Self.notification(49 - offset).id))
            }
        }
    }

    @Test func sameIDTwiceGetsTwoFiles() throws {
        try Self.withSpool { spool, _, _ in
            let notification = try Self.notification(7)
            let first = try spool.store(notification)
            let second = try spool.store(notification)
            #expect(first != second)
            #expect(try spool.pending() == [first, second])
        }
    }

    @Test func removeDecrementsCount() throws {
        try Self.withSpool { spool, path, _ in
            let names = try (0..<5).map { try spool.store(try Self.notification($0)) }
            #expect(spool.count == 5)
            spool.remove(names[2])
            #expect(spool.count == 4)
            #expect(try spool.pending() == [names[0], names[1], names[3], names[4]])
            #expect(throws: (any Error).self) { try spool.load(names[2]) }
            // Removing again, or removing a name that was never stored, changes nothing.
            spool.remove(names[2])
            spool.remove("000000000000000-000000-nothing")
            #expect(spool.count == 4)
            for name in names { spool.remove(name) }
            #expect(spool.count == 0)
            #expect(try Self.list(path + "/queue") == [])
        }
    }

    // MARK: Capacity

    @Test func fullSpoolRefusesAndWritesNothing() throws {
        try Self.withSpool(capacity: 3) { spool, path, _ in
            let names = try (0..<3).map { try spool.store(try Self.notification($0)) }
            let before = try Self.list(path + "/queue")
            #expect(throws: Spool.Full.self) { try spool.store(try Self.notification(3)) }
            #expect(throws: Spool.Full.self) { try spool.store(try Self.notification(4)) }
            #expect(spool.count == 3)
            #expect(try Self.list(path + "/queue") == before)
            #expect(try Self.list(path + "/tmp") == [])
            // Room again after a removal.
            spool.remove(names[0])
            let name = try spool.store(try Self.notification(5))
            #expect(spool.count == 3)
            #expect(try spool.pending() == [names[1], names[2], name])
        }
    }

    @Test func capacityCountsFilesAlreadyThere() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let first = try Spool(directory: path, masterKey: key, capacity: 3)
            let names = try (0..<2).map { try first.store(try Self.notification($0)) }
            let reopened = try Spool(directory: path, masterKey: key, capacity: 3)
            #expect(reopened.count == 2)
            #expect(try reopened.pending() == names)
            #expect(try reopened.load(names[1]) == (try Self.notification(1)))
            _ = try reopened.store(try Self.notification(2))
            #expect(throws: Spool.Full.self) { try reopened.store(try Self.notification(3)) }
        }
    }

    @Test func leftoversInTmpAreDeletedOnOpen() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let spool = try Spool(directory: path, masterKey: key, capacity: 10)
            let kept = try spool.store(try Self.notification(1))
            // An unacknowledged write interrupted by a crash.
            try URL(fileURLWithPath: path + "/tmp/000000000000001-000000-00000000000000000000000000000002").write("partial")
            try URL(fileURLWithPath: path + "/tmp/junk").write([])
            let reopened = try Spool(directory: path, masterKey: key, capacity: 10)
            #expect(try Self.list(path + "/tmp") == [])
            #expect(reopened.count == 1)
            #expect(try reopened.pending() == [kept])
        }
    }

    // MARK: Sealing

    @Test func filesAreSealed() throws {
        try Self.withSpool { spool, path, _ in
            let notification = try Self.notification(1)
            let name = try spool.store(notification)
            let onDisk = try Data(contentsOf: URL(fileURLWithPath: path + "/queue/" + name))
            let json = notification.json
            #expect(onDisk.count == AESGCMKey.nonceSize + json.count + AESGCMKey.tagSize)
            for secret in [Self.alertText, "Alice", notification.deviceToken.hex, "com.example.mail"] {
                #expect(onDisk.range(of: Data(secret.utf8)) == nil, "\(secret)")
            }
            // Opening it by hand needs the derived key and the file name as associated data.
            let sealed = [UInt8](onDisk)
            #expect(throws: OpenSSLError.self) { try AESGCMKey.random().open(sealed, associatedData: Array(name.utf8)) }
        }
    }

    @Test func sealedUnderTheDocumentedDerivedKey() throws {
        try Self.withSpool { spool, path, master in
            let notification = try Self.notification(3)
            let name = try spool.store(notification)
            let sealed = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path + "/queue/" + name)))
            let opened = try master.derived(label: "ens/v1/spool").open(sealed, associatedData: Array(name.utf8))
            #expect(opened == notification.json)
            #expect(throws: OpenSSLError.self) { try master.open(sealed, associatedData: Array(name.utf8)) }
        }
    }

    @Test func anotherMasterKeyCannotLoad() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let spool = try Spool(directory: path, masterKey: try AESGCMKey.random(), capacity: 10)
            let name = try spool.store(try Self.notification(1))
            let other = try Spool(directory: path, masterKey: try AESGCMKey.random(), capacity: 10)
            #expect(other.count == 1)
            #expect(throws: (any Error).self) { try other.load(name) }
        }
    }

    @Test func renamedFileDoesNotLoad() throws {
        try Self.withSpool { spool, path, _ in
            let first = try spool.store(try Self.notification(1))
            let second = try spool.store(try Self.notification(2))
            // Move the first file over the second's name (and to a fresh name).
            let firstBytes = try Data(contentsOf: URL(fileURLWithPath: path + "/queue/" + first))
            try firstBytes.write(to: URL(fileURLWithPath: path + "/queue/" + second))
            #expect(throws: (any Error).self) { try spool.load(second) }
            let moved = "999999999999999-000000-" + (try Self.notification(1)).id
            try FileManager.default.moveItem(atPath: path + "/queue/" + first, toPath: path + "/queue/" + moved)
            #expect(throws: (any Error).self) { try spool.load(moved) }
            // Moving it back restores it.
            try FileManager.default.moveItem(atPath: path + "/queue/" + moved, toPath: path + "/queue/" + first)
            #expect(try spool.load(first) == (try Self.notification(1)))
        }
    }

    @Test func flippedByteDoesNotLoad() throws {
        try Self.withSpool { spool, path, _ in
            let name = try spool.store(try Self.notification(1))
            let file = URL(fileURLWithPath: path + "/queue/" + name)
            let original = try [UInt8](Data(contentsOf: file))
            var generator = SeededGenerator(seed: 0xF11)
            let positions = [0, 11, 12, original.count / 2, original.count - 17, original.count - 16, original.count - 1]
                + (0..<20).map { _ in Int.random(in: 0..<original.count, using: &generator) }
            for position in positions {
                var tampered = original
                tampered[position] ^= 0x01
                try file.write(tampered)
                #expect(throws: (any Error).self, "byte \(position)") { try spool.load(name) }
            }
            // Truncated and extended files fail too.
            try file.write(Array(original.dropLast()))
            #expect(throws: (any Error).self) { try spool.load(name) }
            try file.write(original + [0])
            #expect(throws: (any Error).self) { try spool.load(name) }
            try file.write(original)
            #expect(try spool.load(name) == (try Self.notification(1)))
        }
    }

    @Test func loadingAMissingNameFails() throws {
        try Self.withSpool { spool, _, _ in
            #expect(throws: (any Error).self) { try spool.load("000000000000000-000000-0123") }
        }
    }
}
