// libfcgi's thread-safe request API. Only the FastCGI wrapper module imports this.
#include <fcgiapp.h>

// epoll and eventfd are not in Swift's Glibc module; the FastCGI wrapper multiplexes
// kept-alive nginx connections with them (see ConnectionMultiplexer.swift).
#include <sys/epoll.h>
#include <sys/eventfd.h>
