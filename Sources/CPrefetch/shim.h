#ifndef PROFILED_CPREFETCH_SHIM_H
#define PROFILED_CPREFETCH_SHIM_H

/// Asks the CPU to start loading the cache line at `address` for reading, without waiting
/// for it. Swift has no prefetch of its own; being static inline, this compiles into the
/// caller as one instruction. It never faults, whatever the address.
static inline void profiled_prefetch(const void *address) {
    __builtin_prefetch(address, 0, 3);
}

#endif
