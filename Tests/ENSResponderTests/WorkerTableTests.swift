import ENSTestSupport
import Testing
@testable import ENSResponder

/// The supervisor's bookkeeping, driven with a fake clock (milliseconds).
@Suite struct WorkerTableTests {
    @Test func allSlotsStartImmediately() {
        let table = WorkerTable(count: 3)
        #expect(table.slotsReadyToStart(now: 0) == [0, 1, 2])
        #expect(table.runningPIDs.isEmpty)
        #expect((0..<3).allSatisfy { table.delay(slot: $0) == 0 })
    }

    @Test func startedSlotsAreNotReady() {
        var table = WorkerTable(count: 3)
        table.started(slot: 0, pid: 100, now: 10)
        table.started(slot: 2, pid: 102, now: 10)
        #expect(table.slotsReadyToStart(now: 10) == [1])
        #expect(table.runningPIDs == [100, 102])
    }

    @Test func quickDeathsBackOffExponentiallyUpToTenSeconds() {
        var table = WorkerTable(count: 1)
        var now: UInt64 = 1_000_000
        var pid: Int32 = 500
        var delays: [UInt64] = []
        for _ in 0..<9 {
            #expect(table.slotsReadyToStart(now: now) == [0])
            table.started(slot: 0, pid: pid, now: now)
            now += 100  // dies 100 ms after starting
            #expect(table.exited(pid: pid, now: now) == 0)
            let delay = table.delay(slot: 0)
            delays.append(delay)
            // Not before the delay has passed, and exactly then.
            #expect(table.slotsReadyToStart(now: now + delay - 1).isEmpty)
            #expect(table.slotsReadyToStart(now: now + delay) == [0])
            now += delay
            pid += 1
        }
        #expect(delays == [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000])
    }

    @Test func longLivedWorkerResetsTheBackOff() {
        var table = WorkerTable(count: 1)
        var now: UInt64 = 0
        for pid: Int32 in 1...4 {
            table.started(slot: 0, pid: pid, now: now)
            now += 10
            _ = table.exited(pid: pid, now: now)
            now += table.delay(slot: 0)
        }
        #expect(table.delay(slot: 0) == 2000)

        // A worker that ran for a minute dies: restart at once, delay forgotten.
        table.started(slot: 0, pid: 50, now: now)
        now += 60_000
        #expect(table.exited(pid: 50, now: now) == 0)
        #expect(table.delay(slot: 0) == 0)
        #expect(table.slotsReadyToStart(now: now) == [0])

        // And the next quick death starts again from the bottom.
        table.started(slot: 0, pid: 51, now: now)
        #expect(table.exited(pid: 51, now: now + 1) == 0)
        #expect(table.delay(slot: 0) == 250)
    }

    @Test func fiveSecondBoundary() {
        var table = WorkerTable(count: 2)
        table.started(slot: 0, pid: 1, now: 1000)
        table.started(slot: 1, pid: 2, now: 1000)
        #expect(table.exited(pid: 1, now: 1000 + 4999) == 0)
        #expect(table.delay(slot: 0) == 250, "4.999 s is a quick death")
        #expect(table.exited(pid: 2, now: 1000 + 5000) == 1)
        #expect(table.delay(slot: 1) == 0, "5 s counts as long-lived")
        #expect(table.slotsReadyToStart(now: 6000) == [1])
        #expect(table.slotsReadyToStart(now: 6248) == [1])
        #expect(table.slotsReadyToStart(now: 6249) == [0, 1])
    }

    @Test func unknownPIDIsIgnored() {
        var table = WorkerTable(count: 2)
        table.started(slot: 0, pid: 10, now: 0)
        table.started(slot: 1, pid: 11, now: 0)
        #expect(table.exited(pid: 99, now: 100) == nil)
        #expect(table.runningPIDs == [10, 11])
        #expect(table.delay(slot: 0) == 0 && table.delay(slot: 1) == 0)
        #expect(table.slotsReadyToStart(now: 100).isEmpty)

        // A pid already reaped is a stranger the second time.
        #expect(table.exited(pid: 10, now: 100) == 0)
        #expect(table.exited(pid: 10, now: 101) == nil)
        #expect(table.delay(slot: 0) == 250)
        #expect(table.runningPIDs == [11])
    }

    @Test func slotsAreIndependent() {
        var table = WorkerTable(count: 3)
        for slot in 0..<3 { table.started(slot: slot, pid: Int32(100 + slot), now: 0) }
        _ = table.exited(pid: 101, now: 50)
        #expect(table.delay(slot: 0) == 0)
        #expect(table.delay(slot: 1) == 250)
        #expect(table.delay(slot: 2) == 0)
        #expect(table.runningPIDs == [100, 102])
        #expect(table.slotsReadyToStart(now: 299).isEmpty)
        #expect(table.slotsReadyToStart(now: 300) == [1])
    }

    @Test func failedSpawnBacksOffToo() {
        var table = WorkerTable(count: 1)
        var now: UInt64 = 0
        var delays: [UInt64] = []
        for _ in 0..<8 {
            #expect(table.slotsReadyToStart(now: now) == [0])
            table.failedToStart(slot: 0, now: now)
            delays.append(table.delay(slot: 0))
            #expect(table.slotsReadyToStart(now: now).isEmpty)
            now += table.delay(slot: 0)
        }
        #expect(delays == [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000])
        #expect(table.runningPIDs.isEmpty)
    }

    @Test func emptyTable() {
        var table = WorkerTable(count: 0)
        #expect(table.slotsReadyToStart(now: 0).isEmpty)
        #expect(table.exited(pid: 1, now: 0) == nil)
    }
}
