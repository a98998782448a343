#pragma once
#include <cstdint>

#include "attnkit/core/host_device.hpp"

namespace attnkit::cuda {

// n / d and n % d for 0 <= n < 2^31, 0 < d < 2^31, by one multiply-high and a
// shift (Granlund and Montgomery's round-up multiplier, as CUTLASS's
// FastDivmod). An integer division by a runtime value is a ~20-instruction
// dependent sequence: ten of them in fa3bsr's producer (a row -> a raster box,
// raster_tokens.hpp) starved the consumers (STA Wan 22.9 ms against 15.1 ms
// on tile-ordered copies, 2026-12-04), and four in fa3's tile decode
// (tile_scheduler.hpp) were ~5% of the consumers' stall samples at d128
// causal s1k (ncu, 2026-12-05).
struct FastDivmod {
  std::uint32_t divisor = 1, multiplier = 1, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(std::uint32_t d) : divisor(d) {
    while ((std::uint32_t{1} << shift) < d) ++shift;  // ceil(log2 d)
    multiplier = static_cast<std::uint32_t>((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d) / d + 1);
  }
  AK_HOST_DEVICE std::uint32_t div(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t high = __umulhi(n, multiplier);
#else
    const std::uint32_t high = static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * multiplier) >> 32);
#endif
    return (high + n) >> shift;  // high <= n < 2^31: no overflow
  }
};

}  // namespace attnkit::cuda
