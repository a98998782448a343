#pragma once
// Tile-shape variants of fa2 and fa3 timed side by side by bench_fa2
// --variants, so one GPU call compares shapes before the instance table
// (fa2/traits.hpp, sm90/traits.hpp) commits to one per head dim. Each variant
// is instantiated in its own .cu file.
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/params.hpp"

namespace attnkit::bench {

struct Fa2Variant {
  std::string backend;  // the shipped backend its output is checked against: "fa2" or "fa3"
  std::string name;
  int head_dim;
  int (*configure)();
  int (*launch)(const cuda::AttnParams&, void* stream);
};
std::vector<Fa2Variant> fa2_variants();

}  // namespace attnkit::bench

// Defines variant NAME with Fa2Traits<bf16, DIM, MTILES, BLOCKN, WARPS, STAGES, QREGS, MINBLOCKS,
// PREFETCH_DISTANCE, RESCALE_THRESHOLD, SWIZZLE>.
// A derived type, so no variant is the same kernel symbol as a library
// instance (two registrations of one kernel would fight over its attributes).
#define AK_FA2_VARIANT(NAME, DIM, MTILES, BLOCKN, WARPS, STAGES, QREGS, MINBLOCKS, PREFETCH_DISTANCE,         \
                       RESCALE_THRESHOLD, SWIZZLE)                                                        \
  namespace attnkit::bench {                                                                              \
  struct NAME##_traits                                                                                    \
      : cuda::Fa2Traits<__nv_bfloat16, DIM, MTILES, BLOCKN, WARPS, STAGES, QREGS, MINBLOCKS, PREFETCH_DISTANCE,    \
                        RESCALE_THRESHOLD, SWIZZLE> {};                                                    \
  int NAME##_configure() { return static_cast<int>(cuda::fa2_configure<NAME##_traits>()); }               \
  int NAME##_launch(const cuda::AttnParams& p, void* s) {                                                  \
    return static_cast<int>(cuda::fa2_launch<NAME##_traits>(p, static_cast<cudaStream_t>(s)));            \
  }                                                                                                        \
  }

// Defines variant NAME with Fa3Traits<bf16, QK, V, BLOCKM, BLOCKN, STAGES, PRODUCER_REGS, CONSUMER_REGS,
// PINGPONG, PERSISTENT, RESCALE_THRESHOLD, no skip-softmax, DEFER_RESCALE, WAIT_AFTER_SOFTMAX, STORE_O_TMA> (a derived
// type: a kernel symbol of its own).
#define AK_FA3_VARIANT(NAME, QK, V, BLOCKM, BLOCKN, STAGES, PRODUCER_REGS, CONSUMER_REGS, PINGPONG, PERSISTENT, \
                       RESCALE_THRESHOLD, DEFER_RESCALE, WAIT_AFTER_SOFTMAX, STORE_O_TMA)                        \
  namespace attnkit::bench {                                                                                 \
  struct NAME##_traits : cuda::sm90::Fa3Traits<__nv_bfloat16, QK, V, BLOCKM, BLOCKN, STAGES, PRODUCER_REGS,   \
                                               CONSUMER_REGS, PINGPONG, PERSISTENT, RESCALE_THRESHOLD, false, \
                                               DEFER_RESCALE, WAIT_AFTER_SOFTMAX, STORE_O_TMA> {};            \
  int NAME##_configure() {                                                                                    \
    int err = static_cast<int>(cuda::sm90::fa3_configure<NAME##_traits>());                                   \
    int resident = 0; /* CTAs an SM holds: the tile shape's occupancy, as the driver grants it */             \
    if (err == 0)                                                                                             \
      err = static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessor(                                   \
          &resident, cuda::sm90::fa3_forward_kernel<NAME##_traits, false, false, false>,                      \
          NAME##_traits::kThreads, NAME##_traits::kSmemBytes));                                               \
    if (err == 0)                                                                                             \
      std::printf("%s: %d CTA(s) an SM (%zu bytes of shared memory each)\n", #NAME, resident,                \
                  static_cast<std::size_t>(NAME##_traits::kSmemBytes));                                       \
    return err;                                                                                               \
  }                                                                                                           \
  int NAME##_launch(const cuda::AttnParams& p, void* s) {                                                     \
    return static_cast<int>(cuda::sm90::fa3_launch<NAME##_traits>(p, static_cast<cudaStream_t>(s)));         \
  }                                                                                                           \
  }
