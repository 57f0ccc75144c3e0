// libFuzzer's public entry for programs that keep their own main (-sanitize=fuzzer
// links it in; see https://llvm.org/docs/LibFuzzer.html#using-libfuzzer-as-a-library).
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
