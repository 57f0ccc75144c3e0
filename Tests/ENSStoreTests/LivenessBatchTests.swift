import ENSTestSupport
@testable import ENSStore
import Testing

/// The liveness recorder's batches come in ten shapes (1, 2, 4 … 512 items), so its
/// connection keeps ten prepared statements per kind, not one per batch size.
@Suite struct LivenessBatchTests {
    @Test func aBatchIsPaddedToThePowerOfTwoAboveIt() {
        let sizes = (1...LivenessRecorder.batchLimit).map { LivenessRecorder.padded(Array(repeating: 7, count: $0), with: 0).count }
        #expect(Set(sizes) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
        for (count, size) in zip(1..., sizes) {
            #expect(size >= count && size < 2 * count, "\(count) items padded to \(size)")
        }
        #expect(LivenessRecorder.padded([1, 2, 3], with: 0) == [1, 2, 3, 0])
        #expect(LivenessRecorder.padded([5], with: 0) == [5])
    }
}
