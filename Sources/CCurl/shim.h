// libcurl. Only the Curl wrapper module imports this.
#include <curl/curl.h>

// curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are variadic, which Swift
// cannot call; these typed wrappers are the only way the Curl module sets options.
static inline CURLcode ccurl_easy_setopt_long(CURL *_Nonnull h, CURLoption o, long v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode ccurl_easy_setopt_ptr(CURL *_Nonnull h, CURLoption o, const void *_Nullable v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode ccurl_easy_setopt_string(CURL *_Nonnull h, CURLoption o, const char *_Nullable v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode ccurl_easy_setopt_off(CURL *_Nonnull h, CURLoption o, curl_off_t v) {
    return curl_easy_setopt(h, o, v);
}
typedef size_t (*ccurl_data_callback)(char *_Nonnull, size_t, size_t, void *_Nullable);
static inline CURLcode ccurl_easy_setopt_data_callback(CURL *_Nonnull h, CURLoption o, ccurl_data_callback _Nullable cb) {
    return curl_easy_setopt(h, o, cb);
}
static inline CURLcode ccurl_easy_getinfo_long(CURL *_Nonnull h, CURLINFO i, long *_Nonnull out) {
    return curl_easy_getinfo(h, i, out);
}
static inline CURLcode ccurl_easy_getinfo_ptr(CURL *_Nonnull h, CURLINFO i, void *_Nullable *_Nonnull out) {
    return curl_easy_getinfo(h, i, out);
}
static inline CURLMcode ccurl_multi_setopt_long(CURLM *_Nonnull m, CURLMoption o, long v) {
    return curl_multi_setopt(m, o, v);
}
// CURL_GLOBAL_DEFAULT is a macro Swift imports with the wrong integer type.
static inline CURLcode ccurl_global_init_default(void) { return curl_global_init(CURL_GLOBAL_DEFAULT); }

// The sockets libcurl opens for the HTTP/2 multiplexer: a callback is told of each new
// one (CURLOPT_SOCKOPTFUNCTION) and closes each one (CURLOPT_CLOSESOCKETFUNCTION), so
// the Curl module can cork them while libcurl writes.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
typedef int (*ccurl_sockopt_callback)(void *_Nullable clientp, curl_socket_t fd, curlsocktype purpose);
static inline CURLcode ccurl_easy_setopt_sockopt_callback(CURL *_Nonnull h, ccurl_sockopt_callback _Nullable cb) {
    return curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, cb);
}
typedef int (*ccurl_closesocket_callback)(void *_Nullable clientp, curl_socket_t fd);
static inline CURLcode ccurl_easy_setopt_closesocket_callback(CURL *_Nonnull h, ccurl_closesocket_callback _Nullable cb) {
    return curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, cb);
}
// TCP_CORK: while on, the kernel holds partial segments back; turning it off sends
// everything held in full segments.
static inline int ccurl_socket_cork(curl_socket_t fd, int on) {
    return setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
}
static inline int ccurl_socket_close(curl_socket_t fd) { return close(fd); }
