// Compiles kernels/cpu/flash_fwd-inl.h once per Highway target and exports it
// for run-time dispatch. SSSE3/SSE4 add nothing over the 128-bit emulation for
// this kernel's purpose, and AVX3_DL nothing over AVX3 (bf16 dot products go
// through bf16_dot_avx512.cpp): they are left out to keep compile times short.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu_flash/flash_dispatch.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/cpu/flash_fwd-inl.h"

#if HWY_ONCE
#include "backends/cpu_flash/flash_dispatch.hpp"

namespace attnkit::kernels::cpu {
HWY_EXPORT(FlashQTile);
HWY_EXPORT(MaxMagnitudeBits);
}  // namespace attnkit::kernels::cpu

namespace attnkit::cpu_flash {
namespace {

void dynamic_flash_tile(const kernels::cpu::FlashArgs& a, const kernels::cpu::HeadSlice& h, int q0, float* ws) {
  using namespace attnkit::kernels::cpu;  // NOLINT: the dispatch table lives there
  HWY_DYNAMIC_DISPATCH(FlashQTile)(a, h, q0, ws);
}

bool supported(std::int64_t target) { return (hwy::SupportedTargets() & target) != 0; }

}  // namespace

FlashTileFn flash_tile_fn(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::best: return &dynamic_flash_tile;
    case CpuIsa::emu128:
#if HWY_TARGETS & HWY_EMU128
      return &kernels::cpu::N_EMU128::FlashQTile;
#elif HWY_TARGETS & HWY_SCALAR
      return &kernels::cpu::N_SCALAR::FlashQTile;
#else
      return nullptr;
#endif
    case CpuIsa::avx2:
#if HWY_TARGETS & HWY_AVX2
      if (supported(HWY_AVX2)) return &kernels::cpu::N_AVX2::FlashQTile;
#endif
      return nullptr;
    case CpuIsa::avx512:
    case CpuIsa::avx512_bf16:
#if HWY_TARGETS & HWY_AVX3
      if (supported(HWY_AVX3)) return &kernels::cpu::N_AVX3::FlashQTile;
#endif
      return nullptr;
  }
  return nullptr;
}

std::uint32_t max_magnitude_bits(const void* p, kernels::cpu::Elem e, std::int64_t n) {
  using namespace attnkit::kernels::cpu;  // NOLINT: the dispatch table lives there
  return HWY_DYNAMIC_DISPATCH(MaxMagnitudeBits)(p, e, n);
}

bool highway_path_available(CpuIsa isa) { return flash_tile_fn(isa) != nullptr; }

const char* dispatched_target_name() {
  const std::int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return usable ? hwy::TargetName(usable & -usable) : "none";
}

}  // namespace attnkit::cpu_flash
#endif  // HWY_ONCE
