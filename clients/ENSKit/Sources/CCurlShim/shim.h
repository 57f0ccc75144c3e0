// libcurl for ENSKitCurl. curl_easy_setopt and curl_easy_getinfo are variadic, which
// Swift cannot call; these typed wrappers are the only way ENSKitCurl sets options.
#include <curl/curl.h>

static inline CURLcode enskit_curl_setopt_long(CURL *_Nonnull h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode enskit_curl_setopt_ptr(CURL *_Nonnull h, CURLoption o, const void *_Nullable v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode enskit_curl_setopt_off(CURL *_Nonnull h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
typedef size_t (*enskit_curl_data_callback)(char *_Nonnull, size_t, size_t, void *_Nullable);
static inline CURLcode enskit_curl_setopt_callback(CURL *_Nonnull h, CURLoption o, enskit_curl_data_callback _Nullable cb) {
    return curl_easy_setopt(h, o, cb);
}
static inline CURLcode enskit_curl_getinfo_long(CURL *_Nonnull h, CURLINFO i, long *_Nonnull out) { return curl_easy_getinfo(h, i, out); }
static inline CURLcode enskit_curl_global_init(void) { return curl_global_init(CURL_GLOBAL_DEFAULT); }
