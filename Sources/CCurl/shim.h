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
#include <string.h>
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

// Outbound address checks (CURLOPT_OPENSOCKETFUNCTION): libcurl asks for a socket for
// the exact address it is about to connect to, after DNS and CONNECT_TO. The Curl module
// decides from the address's bytes and either opens the socket or refuses.
typedef curl_socket_t (*ccurl_opensocket_callback)(void *_Nullable clientp, curlsocktype purpose, struct curl_sockaddr *_Nonnull address);
static inline CURLcode ccurl_easy_setopt_opensocket_callback(CURL *_Nonnull h, ccurl_opensocket_callback _Nullable cb) {
    return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, cb);
}
// The address's family (AF_INET, AF_INET6, or 0 for anything else) and its 4 or 16
// bytes in `out`.
static inline int ccurl_sockaddr_bytes(const struct curl_sockaddr *_Nonnull address, unsigned char *_Nonnull out) {
    if (address->family == AF_INET && address->addrlen >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&address->addr;
        memcpy(out, &in->sin_addr, 4);
        return AF_INET;
    }
    if (address->family == AF_INET6 && address->addrlen >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&address->addr;
        memcpy(out, &in6->sin6_addr, 16);
        return AF_INET6;
    }
    return 0;
}
static inline curl_socket_t ccurl_open_socket(const struct curl_sockaddr *_Nonnull address) {
    return socket(address->family, address->socktype, address->protocol);
}

// CURLOPT_DEBUGFUNCTION: the IMAP client reads the server's untagged replies (such as
// `* METADATA`), which libcurl hands only to this callback (CURLINFO_HEADER_IN).
typedef int (*ccurl_debug_callback)(CURL *_Nonnull handle, curl_infotype type, char *_Nonnull data, size_t size, void *_Nullable user);
static inline CURLcode ccurl_easy_setopt_debug_callback(CURL *_Nonnull h, ccurl_debug_callback _Nullable cb) {
    return curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, cb);
}
