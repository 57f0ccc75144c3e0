// Linux interfaces that Swift's Glibc module leaves out; only the POSIX module imports this.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

// prctl(2) is variadic, which Swift cannot call: the two uses ENS has, fixed.
static inline int ens_set_dumpable(int dumpable) { return prctl(PR_SET_DUMPABLE, (unsigned long)dumpable, 0UL, 0UL, 0UL); }
static inline int ens_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0UL, 0UL, 0UL, 0UL); }
