internal import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// A core file of an ENS process would hold, in clear, what the process holds: the
/// master key, record private keys, APNs and Graph signing keys, mail credentials
/// opened from a callback URL. Each process forbids them before it reads any secret.
public enum CoreDumps {
    /// No core file, whatever the limits the process inherited (RLIMIT_CORE 0, hard
    /// limit too), and not dumpable: no core through a core_pattern pipe either, and
    /// no ptrace or /proc/<pid>/mem for other processes of the same user. Kept across
    /// fork, reset by execve: every ENS program calls it first, workers included.
    public static func forbid() throws(SystemError) {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        try syscall("setrlimit(RLIMIT_CORE)") { setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &none) }
        try syscall("prctl(PR_SET_DUMPABLE)") { ens_set_dumpable(0) }
    }

    /// Whether this process could still leave a core file.
    public static var allowed: Bool {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &limit)
        return ens_get_dumpable() != 0 || limit.rlim_cur != 0
    }
}
