import ENSTestSupport
import POSIX
import Testing

/// Confinement is checked, not commented: the owner thread may use the value freely,
/// and (in the debug builds tests run) a second thread stops the process.
@Suite struct ThreadConfinedTests {
    @Test func theFirstThreadOwnsTheValue() throws {
        let confined = ThreadConfined([Int]())
        for number in 0..<100 { confined.withValue { $0.append(number) } }
        #expect(confined.withValue { $0.count } == 100)
        // Ownership is claimed by the first access, not by whoever made the value.
        let made = ThreadConfined(0)
        let thread = try OSThread.start {
            for _ in 0..<10 { made.withValue { $0 += 1 } }
        }
        thread.join()
    }

    @Test func aSecondThreadIsStopped() async {
        await #expect(processExitsWith: .failure) {
            let confined = ThreadConfined(0)
            confined.withValue { $0 += 1 }
            let thread = try OSThread.start { confined.withValue { $0 += 1 } }
            thread.join()
        }
    }
}
