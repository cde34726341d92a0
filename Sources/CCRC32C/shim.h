#ifndef PROFILED_CCRC32C_SHIM_H
#define PROFILED_CCRC32C_SHIM_H
// The CPU's own CRC-32C instruction (SSE4.2 on x86-64), for the write log's checksums. Swift
// reaches no such instruction; being static inline, these compile into the caller.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

/// 1 when the CPU has the CRC-32C instruction (SSE4.2), else 0.
static inline int profiled_crc32c_hardware_available(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_SSE4_2) != 0;
}

/// Continues the raw CRC-32C register `crc` over `count` bytes (no inversion before or after).
/// Only when `profiled_crc32c_hardware_available` said 1.
__attribute__((target("sse4.2")))
static inline uint32_t profiled_crc32c_hardware(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = (const unsigned char *)bytes;
    uint64_t wide = crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = __builtin_ia32_crc32di(wide, word);
        p += 8;
        count -= 8;
    }
    uint32_t narrow = (uint32_t)wide;
    while (count > 0) {
        narrow = __builtin_ia32_crc32qi(narrow, *p);
        p += 1;
        count -= 1;
    }
    return narrow;
}
#else
static inline int profiled_crc32c_hardware_available(void) { return 0; }
static inline uint32_t profiled_crc32c_hardware(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}
#endif

#endif
