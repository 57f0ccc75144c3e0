internal import Codecs
internal import SenderWire
internal import POSIX
internal import OpenSSL

/// The spool on disk: where segments and their done marks live, and how a record is laid
/// out. A record is `"ENS1"`, the sealed length (UInt32, big-endian) and the sealed
/// notification; a done mark is the record's offset, 4 bytes little-endian.
enum SpoolLayout {
    static let magic: [UInt8] = Array("ENS1".utf8)
    static let headerSize = 8
    /// A segment written since 2026-11-25 starts with `"ENSK"` and a 32-byte random salt:
    /// its records are sealed under a key of its own, derived from the spool key and the
    /// salt (`segmentKey`), so no key ever seals more than one segment's records (a few
    /// tens of thousands), far inside AES-GCM's bound for random nonces. Nothing new to
    /// back up: the master key and the file are enough. A segment without it (written
    /// before) has records from offset 0, sealed under the spool key itself.
    static let segmentMagic: [UInt8] = Array("ENSK".utf8)
    static let saltSize = 32
    static let segmentHeaderSize = 4 + saltSize

    static func segmentHeader(salt: [UInt8]) -> [UInt8] { segmentMagic + salt }

    /// The key every segment key derives from (and that seals segments without a salt).
    static func spoolKey(masterKey: AESGCMKey) -> AESGCMKey {
        masterKey.derived(label: "ens/v1/spool")
    }

    static func segmentKey(spoolKey: AESGCMKey, salt: [UInt8]) -> AESGCMKey {
        spoolKey.derived(label: "ens/v2/spool-segment/" + Hex.encode(salt))
    }
    /// Far above any notification (APNs payloads are at most 4 KiB); a larger length
    /// in a header means the header itself is damaged.
    static let maximumSealedSize = 64 * 1024

    static func segmentPath(_ directory: String, _ number: UInt32) -> String {
        directory + "/log/" + paddedNumber(number) + ".seg"
    }

    static func donePath(_ directory: String, _ number: UInt32) -> String {
        directory + "/log/" + paddedNumber(number) + ".done"
    }

    static func paddedNumber(_ number: UInt32) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, 10 - digits.utf8.count)) + digits
    }

    /// Segment numbers found in the log directory, and whether the segment file itself
    /// is there (a `.done` file can outlive its segment if a crash fell between the two
    /// deletions). Other files are left alone.
    static func segmentNumbers(in directory: String) throws -> [(UInt32, Bool)] {
        var found: [UInt32: Bool] = [:]
        for name in try Files.list(directory) {
            let parts = name.split(separator: ".")
            guard parts.count == 2, parts[0].utf8.count == 10, parts[0].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let number = UInt32(parts[0]) else { continue }
            if parts[1] == "seg" { found[number] = true } else if parts[1] == "done" { found[number] = found[number] ?? false }
        }
        return found.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// The offsets of the complete records in a segment, whether it ends in a torn one,
    /// and its salt (nil: a segment from before per-segment keys).
    static func scan(segment path: String) throws -> (Set<UInt32>, torn: Bool, salt: [UInt8]?) {
        let file = try LogFile(path: path, mode: .readOnly)
        let size = try file.size()
        var offsets = Set<UInt32>()
        var offset = 0
        var salt: [UInt8]?
        if size >= 4, try file.read(count: 4, at: 0) == segmentMagic {
            let header = try file.read(count: segmentHeaderSize, at: 0)
            guard header.count == segmentHeaderSize else { return ([], true, nil) }  // torn in its header
            salt = Array(header[4...])
            offset = segmentHeaderSize
        }
        while offset < size {
            guard let length = sealedLength(header: try file.read(count: headerSize, at: offset)),
                  offset + headerSize + length <= size else { return (offsets, true, salt) }
            offsets.insert(UInt32(offset))
            offset += headerSize + length
        }
        return (offsets, false, salt)
    }

    /// Opens the record at `place` of the segment `reader` reads; a record that is cut
    /// short or has a bad header is `DamagedRecord` (naming `entry`, the place the
    /// caller knows it by), one that does not open under `key` an `OpenSSLError`.
    static func readRecord(_ reader: LogFile, at place: SpoolEntry, key: AESGCMKey, reportedAs entry: SpoolEntry) throws -> PushNotification {
        let header = try reader.read(count: headerSize, at: Int(place.offset))
        guard let length = sealedLength(header: header) else { throw Spool.DamagedRecord(entry: entry) }
        let sealed = try reader.read(count: length, at: Int(place.offset) + headerSize)
        guard sealed.count == length else { throw Spool.DamagedRecord(entry: entry) }
        return try PushNotification(json: key.open(sealed, associatedData: associatedData(place)))
    }

    static func doneOffsets(_ path: String) throws -> Set<UInt32> {
        guard Files.exists(path) else { return [] }
        let bytes = try Files.read(path, limit: 1 << 30)
        var offsets = Set<UInt32>()
        var index = 0
        while index + 4 <= bytes.count {  // a torn last mark is ignored: that record is replayed
            offsets.insert(UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24)
            index += 4
        }
        return offsets
    }

    static func sealedLength(header: [UInt8]) -> Int? {
        guard header.count == headerSize, Array(header[0..<4]) == magic else { return nil }
        let length = Int(header[4]) << 24 | Int(header[5]) << 16 | Int(header[6]) << 8 | Int(header[7])
        guard length >= AESGCMKey.nonceSize + AESGCMKey.tagSize, length <= maximumSealedSize else { return nil }
        return length
    }

    static func associatedData(_ entry: SpoolEntry) -> [UInt8] {
        Array("\(entry.segment):\(entry.offset)".utf8)
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    static func littleEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value & 0xFF), UInt8((value >> 8) & 0xFF), UInt8((value >> 16) & 0xFF), UInt8(value >> 24)]
    }
}
