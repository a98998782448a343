#pragma once
// Host memory checks made before allocating, so that a problem too large for
// this machine is refused with a code (AK1013) instead of failing partway
// (an uncaught std::bad_alloc, or the OOM killer once the pages are touched).
#include <cstdint>
#include <string_view>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit {

// Bytes this machine can allocate now without swapping: MemAvailable of
// /proc/meminfo, else the physical memory.
std::int64_t host_memory_available();

// Empty when `bytes` fit in host_memory_available(); AK1013 naming `what` otherwise.
// Negative `bytes` stand for a size that overflowed while being computed.
Diagnostics check_host_allocation(std::string_view what, std::int64_t bytes);
// AK1013 for an allocation of `bytes` (< 0: unknown) that failed (std::bad_alloc).
Diagnostic host_allocation_failed(std::string_view what, std::int64_t bytes);

// Threads for attnkit's host parallel regions: OpenMP's default team size
// (OMP_NUM_THREADS), at most max(1024, processors). libgomp lays out a team's
// start data on the calling thread's stack, so OMP_NUM_THREADS=100000 crashed
// (SIGSEGV) at the first parallel region; every region names this team size.
int host_threads();

}  // namespace attnkit
