// Linux interfaces that Swift's Glibc module leaves out; only the POSIX module imports this.
#include <sys/epoll.h>
#include <sys/eventfd.h>
