import ENSTestSupport
import Testing
@testable import SenderWire

@Suite struct FrameTests {
    static func header(magic: [UInt8] = Array("EN".utf8), version: UInt8 = Frame.version, kind: UInt8 = 1, length: UInt32) -> [UInt8] {
        magic + [version, kind, UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
    }

    /// Feeds `bytes` to a fresh decoder in the given chunk sizes (cycling), collecting
    /// every frame as soon as it is complete.
    static func decodeAll(_ bytes: [UInt8], chunkSizes: [Int]) throws(FrameError) -> [Frame] {
        var decoder = FrameDecoder()
        var frames: [Frame] = []
        var offset = 0
        var step = 0
        while offset < bytes.count {
            let size = max(1, chunkSizes[step % chunkSizes.count])
            step += 1
            let end = min(bytes.count, offset + size)
            decoder.append(bytes[offset..<end])
            offset = end
            while let frame = try decoder.next() { frames.append(frame) }
        }
        return frames
    }

    static func expectError(_ bytes: [UInt8], _ expected: FrameError, sourceLocation: SourceLocation = #_sourceLocation) {
        var decoder = FrameDecoder()
        decoder.append(bytes)
        do throws(FrameError) {
            let frame = try decoder.next()
            Issue.record("expected \(expected), got \(String(describing: frame))", sourceLocation: sourceLocation)
        } catch {
            #expect(error == expected, sourceLocation: sourceLocation)
        }
    }

    // MARK: Encoding

    @Test func encodedLayout() {
        let frame = Frame(kind: .submit, payload: Array("hello".utf8))
        #expect(frame.encoded == [0x45, 0x4E, 1, 1, 0, 0, 0, 5] + Array("hello".utf8))
        #expect(Frame(kind: .accepted, payload: []).encoded == [0x45, 0x4E, 1, 2, 0, 0, 0, 0])
        #expect(Frame(kind: .refused, payload: [UInt8](repeating: 7, count: 0x0102)).encoded.prefix(8) == [0x45, 0x4E, 1, 3, 0, 0, 1, 2])
        #expect(Frame.headerSize == 8)
    }

    @Test(arguments: [0, 1, 2, 7, 8, 255, 256, 257, 65535, 65536])
    func roundTrip(length: Int) throws {
        var generator = SeededGenerator(seed: UInt64(length) &+ 0xF4A)
        for kind in [Frame.Kind.submit, .accepted, .refused] {
            let frame = Frame(kind: kind, payload: generator.bytes(length))
            var decoder = FrameDecoder()
            decoder.append(frame.encoded)
            #expect(try decoder.next() == frame)
            #expect(try decoder.next() == nil)
        }
    }

    @Test func maximumPayloadIsAccepted() throws {
        let frame = Frame(kind: .submit, payload: [UInt8](repeating: 0x41, count: Frame.maximumPayload))
        #expect(try Self.decodeAll(frame.encoded, chunkSizes: [4096]) == [frame])
    }

    // MARK: Reassembly

    @Test func everySplitPointOfOneFrame() throws {
        let frame = Frame(kind: .submit, payload: Array(#"{"id":"0123"}"#.utf8))
        let bytes = frame.encoded
        for split in 0...bytes.count {
            var decoder = FrameDecoder()
            decoder.append(bytes[0..<split])
            if split < bytes.count {
                #expect(try decoder.next() == nil, "split at \(split)")
            }
            decoder.append(bytes[split...])
            #expect(try decoder.next() == frame, "split at \(split)")
            #expect(try decoder.next() == nil, "split at \(split)")
        }
    }

    @Test func oneByteAtATime() throws {
        var generator = SeededGenerator(seed: 0x0B1)
        let frames = [
            Frame(kind: .submit, payload: generator.bytes(300)),
            Frame(kind: .accepted, payload: []),
            Frame(kind: .refused, payload: Array("spool-full".utf8)),
            Frame(kind: .submit, payload: generator.bytes(1)),
        ]
        let bytes = frames.flatMap(\.encoded)
        var decoder = FrameDecoder()
        var decoded: [Frame] = []
        var completedAt: [Int] = []
        for (index, byte) in bytes.enumerated() {
            decoder.append([byte])
            while let frame = try decoder.next() {
                decoded.append(frame)
                completedAt.append(index + 1)
            }
        }
        #expect(decoded == frames)
        // Each frame comes out exactly when its last byte arrives, not later.
        var ends: [Int] = []
        var total = 0
        for frame in frames {
            total += frame.encoded.count
            ends.append(total)
        }
        #expect(completedAt == ends)
    }

    @Test func severalFramesInOneChunk() throws {
        var generator = SeededGenerator(seed: 0x5E7)
        let frames = (0..<20).map { index in
            Frame(kind: [Frame.Kind.submit, .accepted, .refused][index % 3], payload: generator.bytes(index * 13))
        }
        let bytes = frames.flatMap(\.encoded)
        #expect(try Self.decodeAll(bytes, chunkSizes: [bytes.count]) == frames)
    }

    @Test func randomChunkings() throws {
        var generator = SeededGenerator(seed: 0xC4C)
        let frames = (0..<30).map { _ in
            Frame(kind: .submit, payload: generator.bytes(Int.random(in: 0...500, using: &generator)))
        }
        let bytes = frames.flatMap(\.encoded)
        for _ in 0..<20 {
            let sizes = (0..<16).map { _ in Int.random(in: 1...700, using: &generator) }
            #expect(try Self.decodeAll(bytes, chunkSizes: sizes) == frames, "chunk sizes \(sizes)")
        }
    }

    @Test func partialFrameAfterCompleteOnesWaits() throws {
        let first = Frame(kind: .submit, payload: Array("one".utf8))
        let second = Frame(kind: .submit, payload: Array("two".utf8))
        var decoder = FrameDecoder()
        decoder.append(first.encoded + second.encoded.prefix(9))
        #expect(try decoder.next() == first)
        #expect(try decoder.next() == nil)
        decoder.append(second.encoded.dropFirst(9))
        #expect(try decoder.next() == second)
        #expect(try decoder.next() == nil)
    }

    @Test func emptyDecoderWantsMore() throws {
        var decoder = FrameDecoder()
        #expect(try decoder.next() == nil)
        decoder.append([])
        #expect(try decoder.next() == nil)
    }

    // MARK: Garbage

    @Test func badMagic() {
        for magic in ["XN", "EX", "en", "NE", "\0\0", "GE"] {
            Self.expectError(Self.header(magic: Array(magic.utf8), length: 0), .badMagic)
        }
        // Detected from the first two bytes, before a header is complete.
        Self.expectError(Array("GET / HTTP/1.1\r\n".utf8), .badMagic)
        Self.expectError(Array("EX".utf8), .badMagic)
        #expect(FrameError.badMagic.reason == "bad-frame")
    }

    @Test func unsupportedVersion() {
        for version: UInt8 in [0, 2, 0x7F, 0xFF] {
            Self.expectError(Self.header(version: version, length: 0), .unsupportedVersion(version))
            // Three bytes are enough to tell.
            Self.expectError(Array("EN".utf8) + [version], .unsupportedVersion(version))
            #expect(FrameError.unsupportedVersion(version).reason == "bad-version")
        }
    }

    @Test func unknownKind() {
        for kind: UInt8 in [0, 4, 0x80, 0xFF] {
            Self.expectError(Self.header(kind: kind, length: 0), .unknownKind(kind))
            #expect(FrameError.unknownKind(kind).reason == "bad-frame")
        }
    }

    @Test func oversizeLength() {
        for length: UInt32 in [UInt32(Frame.maximumPayload) + 1, 1 << 20, 1 << 24, 0x7FFF_FFFF, 0xFFFF_FFFF] {
            Self.expectError(Self.header(length: length), .tooLarge(Int(length)))
            #expect(FrameError.tooLarge(Int(length)).reason == "bad-frame")
        }
        #expect("\(FrameError.tooLarge(70000))".contains("70000"))
    }

    @Test func hugeLengthThrowsAsSoonAsTheHeaderIsComplete() throws {
        // No payload byte is needed (and none is buffered) to refuse a 4 GB frame.
        let header = Self.header(length: 0xFFFF_FFFF)
        var decoder = FrameDecoder()
        for byte in header.dropLast() {
            decoder.append([byte])
            #expect(try decoder.next() == nil)
        }
        decoder.append([header.last!])
        #expect(throws: FrameError.tooLarge(0xFFFF_FFFF)) { try decoder.next() }
    }

    @Test func garbageAfterGoodFramesIsRefusedAfterThem() throws {
        let good = Frame(kind: .submit, payload: Array("ok".utf8))
        var decoder = FrameDecoder()
        decoder.append(good.encoded + good.encoded + Array("XXXXXXXXXX".utf8))
        #expect(try decoder.next() == good)
        #expect(try decoder.next() == good)
        #expect(throws: FrameError.badMagic) { try decoder.next() }
    }

    @Test func errorsTakePrecedenceInHeaderOrder() {
        // Bad magic wins over a bad version; a bad version over an unknown kind; an
        // unknown kind over an oversize length.
        Self.expectError(Self.header(magic: Array("XX".utf8), version: 9, kind: 9, length: 0xFFFF_FFFF), .badMagic)
        Self.expectError(Self.header(version: 9, kind: 9, length: 0xFFFF_FFFF), .unsupportedVersion(9))
        Self.expectError(Self.header(kind: 9, length: 0xFFFF_FFFF), .unknownKind(9))
    }
}
