// Linux interfaces that Swift's Glibc module leaves out; only the POSIX module imports this.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

// prctl(2) is variadic, which Swift cannot call: the two uses ENS has, fixed.
static inline int ens_set_dumpable(int dumpable) { return prctl(PR_SET_DUMPABLE, (unsigned long)dumpable, 0UL, 0UL, 0UL); }
static inline int ens_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0UL, 0UL, 0UL, 0UL); }

// Shared memory for counters several processes update (POSIX/SharedWords.swift):
// memfd_create(2) (glibc declares it only with _GNU_SOURCE) and 64-bit atomics on a
// word of a MAP_SHARED mapping, which Swift's Atomic cannot address.
#include <stdint.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>
static inline int ens_memfd_create(const char *name) { return (int)syscall(SYS_memfd_create, name, 0U); }
// pipe2(2) (glibc declares it only with _GNU_SOURCE). No header beyond those above: a
// header included here first (fcntl.h's struct stat) would belong to this module, and
// every file using it would have to import CLinux.
static inline int ens_pipe2(int fds[2], int flags) { return (int)syscall(SYS_pipe2, fds, flags); }
static inline uint64_t ens_atomic_load_u64(const uint64_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
static inline void ens_atomic_store_u64(uint64_t *word, uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }
static inline bool ens_atomic_cas_u64(uint64_t *word, uint64_t expected, uint64_t desired) {
    return __atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
