import ENSTestSupport
import Foundation
import POSIX
import Testing

struct CoreDumpsTests {
    /// What every ENS program does first. The test process gives up its own core files
    /// (nothing of value lost); the kernel's view in /proc/self/limits is the check, not
    /// only our own getter.
    @Test func forbiddingLeavesNoCoreLimitAndNoDumpableFlag() throws {
        try CoreDumps.forbid()
        #expect(!CoreDumps.allowed)
        let limits = try String(contentsOfFile: "/proc/self/limits", encoding: .utf8)
        let core = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") })
        #expect(core.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2).joined(separator: " ") == "0 0", "\(core)")
        try CoreDumps.forbid()  // idempotent
    }
}
