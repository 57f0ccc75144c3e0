#if canImport(Glibc)
import Glibc
#endif

/// CPU scheduling policy for the calling thread and the threads it creates later.
public enum Scheduling {
    /// SCHED_BATCH from <sched.h>; Glibc only declares it under _GNU_SOURCE, which the
    /// Swift importer does not set.
    private static let schedBatch: Int32 = 3

    /// Switches to SCHED_BATCH. A batch thread that is woken does not preempt the
    /// running one, so nginx keeps its CPU long enough to hand over several requests
    /// before a responder runs: fewer context switches per request when nginx and the
    /// responders share a few cores. Needs no privilege.
    public static func useBatchPolicy() throws(SystemError) {
        var parameters = sched_param()
        parameters.sched_priority = 0
        try syscall("sched_setscheduler") { sched_setscheduler(0, schedBatch, &parameters) }
    }
}
