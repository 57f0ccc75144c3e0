import ENSTestSupport
import Foundation
import POSIX
import Testing
@testable import ENSModel

/// The gates that keep slow Exchange work from holding every responder thread.
@Suite struct ConcurrencyGateTests {
    /// Starts `count` holders that stay inside the gate until `release` is signalled.
    static func hold(_ gate: ConcurrencyGate, count: Int, until release: DispatchSemaphore, entered: DispatchSemaphore) throws -> [OSThread] {
        try (0..<count).map { _ in
            try OSThread.start {
                _ = gate.ifAvailable {
                    entered.signal()
                    release.wait()
                }
            }
        }
    }

    @Test func aConcurrentBoundAdmitsThatManyAndNoMore() throws {
        let gate = ConcurrencyGate(.concurrent(2))
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let threads = try Self.hold(gate, count: 2, until: release, entered: entered)
        entered.wait()
        entered.wait()
        #expect(gate.ifAvailable { true } == nil)
        release.signal()
        release.signal()
        threads.forEach { $0.join() }
        #expect(gate.ifAvailable { true } == true)
        #expect(gate.inUse == 0)
    }

    @Test func aSlowBoundTurnsAwayOnlyWhileEnoughHoldersAreSlow() throws {
        let gate = ConcurrencyGate(.slow(2, afterMilliseconds: 100))
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let threads = try Self.hold(gate, count: 2, until: release, entered: entered)
        entered.wait()
        entered.wait()
        // Two holders, neither slow yet: more are admitted (fast work is never refused).
        #expect(gate.ifAvailable { true } == true)
        Thread.sleep(forTimeInterval: 0.25)
        // Both have been inside for over 100 ms: the gate is closed to new work.
        #expect(gate.ifAvailable { true } == nil)
        release.signal()
        release.signal()
        threads.forEach { $0.join() }
        #expect(gate.ifAvailable { true } == true)
    }

    @Test func aThrowingHolderGivesItsPlaceBack() {
        struct Failure: Error {}
        let gate = ConcurrencyGate(.concurrent(1))
        #expect(throws: Failure.self) { try gate.ifAvailable { () throws(Failure) in throw Failure() } }
        #expect(gate.ifAvailable { true } == true)
    }
}
