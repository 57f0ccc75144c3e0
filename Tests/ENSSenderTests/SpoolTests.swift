import ENSTestSupport
import Foundation
import OpenSSL
import POSIX
import Synchronization
import Testing
@testable import ENSModel
@testable import SenderWire
@testable import ENSSender

@Suite struct SpoolTests {
    static let alertText = "Mail from Alice Liddell about the tea party"

    static func notification(_ index: Int, pushType: PushNotification.PushType = .alert) throws -> PushNotification {
        let hex = String(index, radix: 16)
        let payload = pushType == .alert
            ? #"{"aps":{"alert":{"body":"\#(alertText) #\#(index % 10)"}}}"#
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

    static func segment(_ path: String, _ number: UInt32) -> URL {
        URL(fileURLWithPath: SpoolLayout.segmentPath(path, number))
    }

    /// The smallest segments the spool allows, so a few dozen records span several.
    static let smallSegments = 1024

    static func withSpool(capacity: Int = 1000, segmentLimit: Int = 16 << 20, _ body: (Spool, String, AESGCMKey) throws -> Void) throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            try body(try Spool(directory: path, masterKey: key, capacity: capacity, segmentLimit: segmentLimit), path, key)
        }
    }

    // MARK: Storing and loading

    @Test func createsItsDirectoryAndNoSegmentUntilNeeded() throws {
        try Self.withSpool { spool, path, _ in
            #expect(try Self.list(path) == ["log"])
            #expect(try Self.list(path + "/log") == [])
            #expect(spool.count == 0)
            #expect(spool.pending() == [])
            #expect(spool.recovery == Spool.Recovery())
            for directory in [path, path + "/log"] {
                let attributes = try FileManager.default.attributesOfItem(atPath: directory)
                #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o777 } == 0o700)
            }
        }
    }

    @Test func storeLoadRoundTrip() throws {
        try Self.withSpool { spool, path, _ in
            let alert = try Self.notification(1)
            let background = try Self.notification(2, pushType: .background)
            let first = try spool.store(alert)
            let second = try spool.store(background)
            #expect(first == SpoolEntry(segment: 1, offset: UInt32(SpoolLayout.segmentHeaderSize)))
            #expect(second.segment == 1 && second.offset > first.offset)
            #expect(try spool.load(first) == alert)
            #expect(try spool.load(second) == background)
            #expect(spool.count == 2)
            #expect(try Self.list(path + "/log") == ["0000000001.seg"])
            let attributes = try FileManager.default.attributesOfItem(atPath: SpoolLayout.segmentPath(path, 1))
            #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o777 } == 0o600)
            // Loading does not consume.
            #expect(try spool.load(first) == alert)
            #expect(spool.count == 2)
        }
    }

    /// A segment that could not be made (its name taken here; on a full disk, its
    /// header not written) refuses that store, and the next store makes the next one:
    /// one failure does not refuse every store until a restart.
    @Test func aSegmentThatCouldNotBeMadeIsNotTriedAgain() throws {
        try Self.withSpool { spool, path, _ in
            try Data("taken".utf8).write(to: Self.segment(path, 1))
            #expect(throws: (any Error).self) { try spool.store(try Self.notification(1)) }
            let entry = try spool.store(try Self.notification(2))
            #expect(entry.segment == 2)
            #expect(try spool.load(entry) == (try Self.notification(2)))
            #expect(spool.count == 1)
        }
    }

    /// Delivery drops an acknowledged notification only when its record can never be
    /// read: a failed system call (EIO, EMFILE) leaves it to be read again.
    @Test func onlyARecordThatCanNeverBeReadIsDropped() throws {
        #expect(Spool.LoadFailure(SystemError(call: "open", errno: EMFILE)) == .transient)
        #expect(Spool.LoadFailure(SystemError(call: "pread", errno: EIO)) == .transient)
        try Self.withSpool { spool, path, _ in
            let entry = try spool.store(try Self.notification(3))
            for error: any Error in [Spool.DamagedRecord(entry: entry), Spool.NotSpooled(entry: entry)] {
                #expect(Spool.LoadFailure(error) == .permanent, "\(error)")
            }
            // A record whose seal no longer opens, as a bit flipped on disk leaves it.
            let url = Self.segment(path, entry.segment)
            var bytes = try Data(contentsOf: url)
            bytes[bytes.count - 1] ^= 0x01
            try bytes.write(to: url)
            do {
                _ = try spool.load(entry)
                Issue.record("a damaged record loaded")
            } catch {
                #expect(Spool.LoadFailure(error) == .permanent, "\(error)")
            }
        }
    }

    @Test func entriesSortInArrivalOrderAcrossSegments() throws {
        try Self.withSpool(segmentLimit: Self.smallSegments) { spool, path, _ in
            // Ids in descending order, so sorting by id would give the wrong answer.
            var entries: [SpoolEntry] = []
            for index in (0..<50).reversed() {
                entries.append(try spool.store(try Self.notification(index)))
            }
            #expect(Set(entries).count == 50)
            #expect(entries.sorted() == entries)
            #expect(spool.pending() == entries)
            #expect(spool.count == 50)
            #expect(Set(entries.map(\.segment)).count > 5)
            #expect(try Self.list(path + "/log").allSatisfy { $0.hasSuffix(".seg") })
            for (position, entry) in entries.enumerated() {
                #expect(try spool.load(entry).id == (try Self.notification(49 - position).id))
            }
        }
    }

    @Test func sameNotificationTwiceGetsTwoEntries() throws {
        try Self.withSpool { spool, _, _ in
            let notification = try Self.notification(7)
            let first = try spool.store(notification)
            let second = try spool.store(notification)
            #expect(first != second)
            #expect(spool.pending() == [first, second])
        }
    }

    @Test func removeDecrementsCount() throws {
        try Self.withSpool { spool, path, _ in
            let entries = try (0..<5).map { try spool.store(try Self.notification($0)) }
            #expect(spool.count == 5)
            spool.remove(entries[2])
            #expect(spool.count == 4)
            #expect(spool.pending() == [entries[0], entries[1], entries[3], entries[4]])
            #expect(throws: Spool.NotSpooled.self) { try spool.load(entries[2]) }
            // Removing again, or removing an entry that was never stored, changes nothing.
            spool.remove(entries[2])
            spool.remove(SpoolEntry(segment: 1, offset: 3))
            spool.remove(SpoolEntry(segment: 77, offset: 0))
            #expect(spool.count == 4)
            for entry in entries { spool.remove(entry) }
            #expect(spool.count == 0)
            // The segment being written stays; its done marks say what to skip on reopening.
            #expect(try Self.list(path + "/log") == ["0000000001.done", "0000000001.seg"])
            #expect(try Data(contentsOf: URL(fileURLWithPath: SpoolLayout.donePath(path, 1))).count == 5 * 4)
        }
    }

    @Test func finishedSegmentsAreDeleted() throws {
        try Self.withSpool(segmentLimit: Self.smallSegments) { spool, path, _ in
            let entries = try (0..<12).map { try spool.store(try Self.notification($0)) }
            let first = entries.filter { $0.segment == 1 }
            #expect(first.count >= 2 && first.count < entries.count)
            for entry in first.dropLast() { spool.remove(entry) }
            #expect(FileManager.default.fileExists(atPath: SpoolLayout.segmentPath(path, 1)))
            spool.remove(first.last!)
            #expect(!FileManager.default.fileExists(atPath: SpoolLayout.segmentPath(path, 1)))
            #expect(!FileManager.default.fileExists(atPath: SpoolLayout.donePath(path, 1)))
            // Everything else still loads.
            for (index, entry) in entries.enumerated() where entry.segment != 1 {
                #expect(try spool.load(entry) == (try Self.notification(index)))
            }
            // The current segment, emptied, waits until the next one starts.
            let current = entries.last!.segment
            for entry in entries where entry.segment != 1 { spool.remove(entry) }
            #expect(FileManager.default.fileExists(atPath: SpoolLayout.segmentPath(path, current)))
            var next: SpoolEntry
            repeat { next = try spool.store(try Self.notification(99)) } while next.segment == current
            #expect(!FileManager.default.fileExists(atPath: SpoolLayout.segmentPath(path, current)))
            #expect(try spool.load(next).id == (try Self.notification(99)).id)
        }
    }

    // MARK: Compaction

    @Test func compactionMovesStragglersOutOfFinishedSegments() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let spool = try Spool(directory: path, masterKey: key, capacity: 100, segmentLimit: Self.smallSegments)
            let entries = try (0..<12).map { try spool.store(try Self.notification($0)) }
            let segments = Array(Set(entries.map(\.segment))).sorted()
            #expect(segments.count >= 3)
            // Everything delivered but one notification in each of the first two segments.
            let stragglers = [entries.first { $0.segment == segments[0] }!, entries.first { $0.segment == segments[1] }!]
            for entry in entries where entry.segment < segments[2] && !stragglers.contains(entry) { spool.remove(entry) }
            let dense = entries.filter { $0.segment >= segments[2] }
            #expect(spool.compact(segmentsWithAtMost: 0) == 0)
            #expect(spool.compact(segmentsWithAtMost: 1) == 2)
            for segment in segments[0...1] {
                #expect(!FileManager.default.fileExists(atPath: SpoolLayout.segmentPath(path, segment)))
            }
            #expect(spool.count == 2 + dense.count)
            // The entries the delivery queue holds still load and remove.
            for entry in stragglers {
                let index = entries.firstIndex(of: entry)!
                #expect(try spool.load(entry) == (try Self.notification(index)))
            }
            spool.remove(stragglers[0])
            #expect(spool.count == 1 + dense.count)
            #expect(throws: Spool.NotSpooled.self) { try spool.load(stragglers[0]) }
            // Moved again once its new segment is finished too: still the same entry.
            var filler: [SpoolEntry] = []
            while filler.last?.segment ?? 0 <= segments.last! + 1 { filler.append(try spool.store(try Self.notification(50 + filler.count))) }
            for entry in dense + filler.dropLast() { spool.remove(entry) }
            #expect(spool.compact(segmentsWithAtMost: 1) == 1)
            #expect(try spool.load(stragglers[1]) == (try Self.notification(entries.firstIndex(of: stragglers[1])!)))
            // After a restart the moved record is replayed once, from where it is now.
            let reopened = try Spool(directory: path, masterKey: key, capacity: 100)
            #expect(reopened.count == 2)
            #expect(try reopened.pending().map { try reopened.load($0).id }.sorted()
                    == [try Self.notification(entries.firstIndex(of: stragglers[1])!).id, try Self.notification(50 + filler.count - 1).id].sorted())
            spool.remove(stragglers[1])
            #expect(spool.count == 1)
        }
    }

    // MARK: Capacity

    @Test func fullSpoolRefusesAndWritesNothing() throws {
        try Self.withSpool(capacity: 3) { spool, path, _ in
            let entries = try (0..<3).map { try spool.store(try Self.notification($0)) }
            let before = try Data(contentsOf: Self.segment(path, 1))
            #expect(throws: Spool.Full.self) { try spool.store(try Self.notification(3)) }
            #expect(throws: Spool.Full.self) { try spool.store(try Self.notification(4)) }
            #expect(spool.count == 3)
            #expect(try Data(contentsOf: Self.segment(path, 1)) == before)
            // Room again after a removal.
            spool.remove(entries[0])
            let entry = try spool.store(try Self.notification(5))
            #expect(spool.count == 3)
            #expect(spool.pending() == [entries[1], entries[2], entry])
        }
    }

    /// The ingest loop's group commit: writes spanning segments, one commit, all durable.
    @Test func aBatchSpanningSegmentsIsDurableAfterOneCommit() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let spool = try Spool(directory: path, masterKey: key, capacity: 40, segmentLimit: Self.smallSegments)
            var batch = Spool.Batch()
            #expect(batch.isEmpty)
            for index in 0..<40 { try spool.write(try Self.notification(index), into: &batch) }
            #expect(throws: Spool.Full.self) { try spool.write(try Self.notification(40), into: &batch) }
            #expect(batch.entries.count == 40)
            #expect(Set(batch.entries.map(\.segment)).count > 1)  // several segments, each synced once
            #expect(spool.count == 40)
            try spool.commit(batch)
            #expect(spool.pending() == batch.entries)
            let reopened = try Spool(directory: path, masterKey: key, capacity: 40, segmentLimit: Self.smallSegments)
            #expect(reopened.pending() == batch.entries)
            for (index, entry) in batch.entries.enumerated() {
                #expect(try reopened.load(entry) == (try Self.notification(index)))
            }
        }
    }

    // MARK: Reopening (a restart, or a crash)

    @Test func reopeningReplaysWhatIsNotDone() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let first = try Spool(directory: path, masterKey: key, capacity: 4)
            let entries = try (0..<3).map { try first.store(try Self.notification($0)) }
            first.remove(entries[1])
            let reopened = try Spool(directory: path, masterKey: key, capacity: 4)
            #expect(reopened.count == 2)
            #expect(reopened.recovery == Spool.Recovery(pending: 2, tornSegments: 0, imported: 0))
            #expect(reopened.pending() == [entries[0], entries[2]])
            #expect(try reopened.load(entries[2]) == (try Self.notification(2)))
            #expect(throws: Spool.NotSpooled.self) { try reopened.load(entries[1]) }
            // New records go to a new segment; capacity counts what was already there.
            let added = try reopened.store(try Self.notification(3))
            #expect(added.segment > entries[0].segment)
            _ = try reopened.store(try Self.notification(4))
            #expect(throws: Spool.Full.self) { try reopened.store(try Self.notification(5)) }
        }
    }

    @Test func reopeningDeletesSegmentsWithNothingLeft() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let first = try Spool(directory: path, masterKey: key, capacity: 10)
            for entry in try (0..<3).map({ try first.store(try Self.notification($0)) }) { first.remove(entry) }
            // A done file whose segment is already gone (a crash between the two deletions).
            try URL(fileURLWithPath: SpoolLayout.donePath(path, 9)).write([0, 0, 0, 0])
            try URL(fileURLWithPath: path + "/log/README").write("an operator's note")
            let reopened = try Spool(directory: path, masterKey: key, capacity: 10)
            #expect(reopened.count == 0)
            #expect(try Self.list(path + "/log") == ["README"])
            // Numbering continues after the highest segment seen.
            #expect(try reopened.store(try Self.notification(1)).segment == 10)
        }
    }

    @Test func aTornLastRecordIsNotReplayed() throws {
        for tail: [UInt8] in [Array("EN".utf8), Array("ENS1".utf8) + [0, 0, 1, 0] + [UInt8](repeating: 7, count: 40),
                              Array("ENS1".utf8) + [0xFF, 0xFF, 0xFF, 0xFF], [UInt8](repeating: 0, count: 100)] {
            try withTemporaryDirectory { url in
                let path = url.path + "/spool"
                let key = try AESGCMKey.random()
                let first = try Spool(directory: path, masterKey: key, capacity: 10)
                let entries = try (0..<2).map { try first.store(try Self.notification($0)) }
                // A store interrupted by kill -9: never acknowledged, partly on disk.
                let handle = try FileHandle(forWritingTo: Self.segment(path, 1))
                handle.seekToEndOfFile()
                handle.write(Data(tail))
                handle.closeFile()
                let reopened = try Spool(directory: path, masterKey: key, capacity: 10)
                #expect(reopened.recovery == Spool.Recovery(pending: 2, tornSegments: 1, imported: 0), "\(tail.prefix(8))")
                #expect(reopened.pending() == entries)
                let added = try reopened.store(try Self.notification(2))
                #expect(added.segment == 2)
                for (index, entry) in (entries + [added]).enumerated() {
                    #expect(try reopened.load(entry) == (try Self.notification(index)))
                }
            }
        }
    }

    @Test func concurrentStoresAllLand() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let spool = try Spool(directory: path, masterKey: key, capacity: 10_000, segmentLimit: 64 * 1024)
            let stored = Mutex<[(Int, SpoolEntry)]>([])
            let failures = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 16) { thread in
                for index in stride(from: thread, to: 1600, by: 16) {
                    do {
                        let entry = try spool.store(try Self.notification(index))
                        stored.withLock { $0.append((index, entry)) }
                    } catch {
                        failures.add(1, ordering: .relaxed)
                    }
                }
            }
            #expect(failures.load(ordering: .relaxed) == 0)
            let all = stored.withLock { $0 }
            #expect(all.count == 1600)
            #expect(Set(all.map(\.1)).count == 1600)
            #expect(spool.count == 1600)
            let reopened = try Spool(directory: path, masterKey: key, capacity: 10_000)
            #expect(reopened.pending() == all.map(\.1).sorted())
            for (index, entry) in all {
                #expect(try reopened.load(entry).id == (try Self.notification(index)).id)
            }
        }
    }

    // MARK: Sealing

    /// The documented layout, opened by an independent implementation: Python's
    /// `cryptography` derives the segment key (HMAC-SHA-256 of "ens/v1/spool" under the
    /// master key, then of "ens/v2/spool-segment/<salt hex>") and opens the record with
    /// AES-256-GCM and "<segment>:<offset>" as associated data.
    @Test func recordsAreSealedUnderTheirSegmentsKey() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let masterBytes = (0..<32).map { UInt8($0 * 7 & 0xFF) }
            let spool = try Spool(directory: path, masterKey: try AESGCMKey(bytes: masterBytes), capacity: 10)
            let notification = try Self.notification(1)
            let entry = try spool.store(notification)
            let onDisk = try [UInt8](Data(contentsOf: Self.segment(path, entry.segment)))
            let json = notification.json
            let sealedLength = AESGCMKey.nonceSize + json.count + AESGCMKey.tagSize
            let header = SpoolLayout.segmentHeaderSize
            #expect(Array(onDisk[0..<4]) == Array("ENSK".utf8) && header == 36)
            #expect(onDisk.count == header + 8 + sealedLength)
            #expect(Array(onDisk[header..<header + 8]) == Array("ENS1".utf8) + [0, 0, UInt8(sealedLength >> 8), UInt8(sealedLength & 0xFF)])
            for secret in [Self.alertText, "Alice", notification.deviceToken.value, "com.example.mail"] {
                #expect(Data(onDisk).range(of: Data(secret.utf8)) == nil, "\(secret)")
            }
            let file = url.appendingPathComponent("segment")
            try file.write(onDisk)
            let opened = try Shell.python("""
                import hashlib, hmac, sys
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
                master = bytes(i * 7 & 0xFF for i in range(32))
                data = open(sys.argv[1], "rb").read()
                assert data[:4] == b"ENSK"
                salt = data[4:36]
                spool = hmac.new(master, b"ens/v1/spool", hashlib.sha256).digest()
                key = hmac.new(spool, b"ens/v2/spool-segment/" + salt.hex().encode(), hashlib.sha256).digest()
                length = int.from_bytes(data[40:44], "big")
                sealed = data[44:44 + length]
                print(AESGCM(key).decrypt(sealed[:12], sealed[12:], b"1:36").decode())
                """, [file.path])
            #expect(opened == String(decoding: json, as: UTF8.self))
        }
    }

    /// Every segment has a key of its own: no key seals more than one segment's records.
    @Test func eachSegmentHasItsOwnSalt() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let key = try AESGCMKey.random()
            let spool = try Spool(directory: path, masterKey: key, capacity: 100, segmentLimit: Self.smallSegments)
            let entries = try (0..<12).map { try spool.store(try Self.notification($0)) }
            let segments = Set(entries.map(\.segment))
            #expect(segments.count >= 3)
            let salts = try segments.map { try [UInt8](Data(contentsOf: Self.segment(path, $0)))[4..<36] }
            #expect(Set(salts.map { Array($0) }).count == segments.count)
            // And they reopen, each under its own key.
            let reopened = try Spool(directory: path, masterKey: key, capacity: 100)
            for (index, entry) in entries.enumerated() { #expect(try reopened.load(entry) == (try Self.notification(index))) }
        }
    }

    /// A segment written before per-segment keys (records from offset 0, sealed under
    /// the spool key) is still delivered after the upgrade; new records go to a new,
    /// keyed segment.
    @Test func aSegmentFromBeforePerSegmentKeysStillOpens() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let master = try AESGCMKey.random()
            try FileManager.default.createDirectory(atPath: path + "/log", withIntermediateDirectories: true)
            var legacy: [UInt8] = []
            for index in 0..<2 {
                let sealed = try master.derived(label: "ens/v1/spool").seal(try Self.notification(index).json,
                                                                           associatedData: Array("7:\(legacy.count)".utf8))
                legacy += Array("ENS1".utf8) + SpoolLayout.bigEndian(UInt32(sealed.count)) + sealed
            }
            try Self.segment(path, 7).write(legacy)
            let spool = try Spool(directory: path, masterKey: master, capacity: 10)
            let pending = spool.pending()
            #expect(pending.count == 2 && pending.first == SpoolEntry(segment: 7, offset: 0))
            for (index, entry) in pending.enumerated() { #expect(try spool.load(entry) == (try Self.notification(index))) }
            let added = try spool.store(try Self.notification(5))
            #expect(added == SpoolEntry(segment: 8, offset: UInt32(SpoolLayout.segmentHeaderSize)))
            #expect(try spool.load(added) == (try Self.notification(5)))
        }
    }

    /// A damaged salt gives the wrong key after a restart: the records do not open.
    @Test func aDamagedSaltDoesNotOpen() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let master = try AESGCMKey.random()
            let entry = try Spool(directory: path, masterKey: master, capacity: 10).store(try Self.notification(1))
            var bytes = try [UInt8](Data(contentsOf: Self.segment(path, entry.segment)))
            bytes[10] ^= 0x01
            try Self.segment(path, entry.segment).write(bytes)
            let reopened = try Spool(directory: path, masterKey: master, capacity: 10)
            #expect(reopened.pending() == [entry])
            #expect(throws: (any Error).self) { try reopened.load(entry) }
        }
    }

    @Test func anotherMasterKeyCannotLoad() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let spool = try Spool(directory: path, masterKey: try AESGCMKey.random(), capacity: 10)
            let entry = try spool.store(try Self.notification(1))
            let other = try Spool(directory: path, masterKey: try AESGCMKey.random(), capacity: 10)
            #expect(other.count == 1)
            #expect(throws: (any Error).self) { try other.load(entry) }
        }
    }

    @Test func aRecordCopiedOverAnotherDoesNotLoad() throws {
        try Self.withSpool { spool, path, _ in
            let first = try spool.store(try Self.notification(1))
            let second = try spool.store(try Self.notification(2))
            let file = Self.segment(path, 1)
            let original = try [UInt8](Data(contentsOf: file))
            let header = Int(first.offset)
            let length = Int(second.offset) - header
            #expect(original.count == header + 2 * length)  // same-sized records
            let firstRecord = Array(original[header..<header + length])
            try file.write(Array(original[0..<header]) + firstRecord + firstRecord)
            #expect(try spool.load(first) == (try Self.notification(1)))
            #expect(throws: (any Error).self) { try spool.load(second) }
            try file.write(original)
            #expect(try spool.load(second) == (try Self.notification(2)))
        }
    }

    @Test func flippedByteDoesNotLoad() throws {
        try Self.withSpool { spool, path, _ in
            let entry = try spool.store(try Self.notification(1))
            let file = Self.segment(path, 1)
            let original = try [UInt8](Data(contentsOf: file))
            var generator = SeededGenerator(seed: 0xF11)
            // The record's bytes (the segment's header is checked on reopening, above).
            let start = Int(entry.offset)
            let positions = [0, 3, 4, 6, 7, 8, 19, 20].map { start + $0 }
                + [original.count - (original.count - start) / 2, original.count - 17, original.count - 16, original.count - 1]
                + (0..<20).map { _ in Int.random(in: start..<original.count, using: &generator) }
            for position in positions {
                var tampered = original
                tampered[position] ^= 0x01
                try file.write(tampered)
                #expect(throws: (any Error).self, "byte \(position)") { try spool.load(entry) }
            }
            try file.write(Array(original.dropLast()))
            #expect(throws: (any Error).self) { try spool.load(entry) }
            try file.write(original)
            #expect(try spool.load(entry) == (try Self.notification(1)))
        }
    }

    // MARK: The format before the log

    @Test func importsTheFilePerNotificationSpool() throws {
        try withTemporaryDirectory { url in
            let path = url.path + "/spool"
            let master = try AESGCMKey.random()
            try FileManager.default.createDirectory(atPath: path + "/queue", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: path + "/tmp", withIntermediateDirectories: true)
            let names = ["001700000000001-000000-" + (try Self.notification(1)).id, "001700000000002-000000-" + (try Self.notification(2)).id]
            let oldKey = master.derived(label: "ens/v1/spool")
            for (index, name) in names.enumerated() {
                let json = (try Self.notification(index + 1)).json
                try URL(fileURLWithPath: path + "/queue/" + name).write(try oldKey.seal(json, associatedData: Array(name.utf8)))
            }
            try URL(fileURLWithPath: path + "/queue/damaged").write("not sealed")
            try URL(fileURLWithPath: path + "/tmp/" + names[0]).write("never acknowledged")
            let spool = try Spool(directory: path, masterKey: master, capacity: 10)
            #expect(spool.recovery == Spool.Recovery(pending: 2, tornSegments: 0, imported: 2))
            #expect(spool.count == 2)
            #expect(try spool.pending().map { try spool.load($0) } == [try Self.notification(1), try Self.notification(2)])
            #expect(try Self.list(path) == ["log", "queue"])  // queue/ stays for the file that did not open
            #expect(try Self.list(path + "/queue") == ["damaged"])
        }
    }
}
