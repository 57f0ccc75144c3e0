import ENSTestSupport
import Foundation
@testable import POSIX
import Testing

/// The host-wide limit the Graph per-mailbox gate keeps with flock'd files: other
/// processes' holds count, and a process that dies gives its slots back.
@Suite struct FileSlotsTests {
    @Test func aKeyHasAtMostItsSlotsAndGetsThemBack() throws {
        try withTemporaryDirectory { directory in
            let slots = try FileSlots(directory: directory.path + "/slots", slots: 2)
            var thirdRan = false
            var secondRan = false
            let outer: Bool? = slots.withSlot(key: "users/a") {
                _ = slots.withSlot(key: "users/a") {
                    secondRan = true
                    _ = slots.withSlot(key: "users/a") { thirdRan = true }
                }
                return true
            }
            #expect(outer == true && secondRan)
            #expect(!thirdRan, "a third holder finds no room")
            #expect(slots.withSlot(key: "users/a") { 1 } == 1, "released slots are free again")
        }
    }

    /// Another process (Python's fcntl.flock, independent of this code) holds both
    /// slots of the key's bucket: this process gets none until that process exits.
    @Test func anotherProcessesHoldsCountAndEndWithIt() throws {
        try withTemporaryDirectory { directory in
            let slots = try FileSlots(directory: directory.path + "/slots", slots: 2)
            let key = "users/0f3a5c1e-7d1b-4a52-9f0e-3c2b1a0d9e8f"
            let bucket = Int(FileSlots.stableHash(key) % UInt64(slots.buckets))
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            holder.arguments = ["python3", "-c", """
                import fcntl, sys, time
                held = [open(p, "a") for p in sys.argv[1:]]
                for f in held: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                print("held", flush=True)
                sys.stdin.read()
                """, slots.path(bucket: bucket, slot: 0), slots.path(bucket: bucket, slot: 1)]
            let output = Pipe(), input = Pipe()
            holder.standardOutput = output
            holder.standardInput = input
            try holder.run()
            let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
            #expect(line.hasPrefix("held"))
            #expect(slots.withSlot(key: key) { true } == nil, "both slots are the other process's")
            let other = (0..<100).map { "users/other-\($0)" }.first { Int(FileSlots.stableHash($0) % UInt64(slots.buckets)) != bucket }!
            #expect(slots.withSlot(key: other) { true } == true, "other buckets are free")
            try input.fileHandleForWriting.close()
            holder.waitUntilExit()
            #expect(slots.withSlot(key: key) { true } == true, "its locks ended with it")
        }
    }

    /// A Retry-After one process was told holds for the others: the time is in a file of
    /// the key's bucket, and an earlier time never shortens it.
    @Test func aBlockIsSeenByEveryHolderOfTheDirectory() throws {
        try withTemporaryDirectory { directory in
            let first = try FileSlots(directory: directory.path + "/slots", slots: 4)
            let second = try FileSlots(directory: directory.path + "/slots", slots: 4)
            #expect(second.blockedUntil(key: "users/a") == 0)
            first.block(key: "users/a", untilMilliseconds: 2_000_000_000_000)
            #expect(second.blockedUntil(key: "users/a") == 2_000_000_000_000)
            second.block(key: "users/a", untilMilliseconds: 1_000)
            #expect(first.blockedUntil(key: "users/a") == 2_000_000_000_000)
            // Garbage in the file reads as no block rather than an error.
            try directory.appendingPathComponent("slots/\(FileSlots.stableHash("users/b") % 1024).after").write("not a number")
            #expect(first.blockedUntil(key: "users/b") == 0)
        }
    }

    @Test func theHashIsTheSameInEveryProcess() {
        // FNV-1a test vectors (Fowler, Noll, Vo): "" and "a".
        #expect(FileSlots.stableHash("") == 0xcbf2_9ce4_8422_2325)
        #expect(FileSlots.stableHash("a") == 0xaf63_dc4c_8601_ec8c)
    }
}
