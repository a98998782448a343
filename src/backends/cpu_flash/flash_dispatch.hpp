#pragma once
// The per-target kernels of cpu_flash behind one function-pointer type.
#include "attnkit/backends/cpu_flash.hpp"
#include "kernels/cpu/flash_params.hpp"

namespace attnkit::cpu_flash {

using FlashTileFn = void (*)(const kernels::cpu::FlashArgs&, const kernels::cpu::HeadSlice&, int q0, float* ws);

// The q-tile kernel for `isa` (best: Highway's dynamic dispatch), or nullptr
// when that path is not compiled or this CPU cannot run it.
FlashTileFn flash_tile_fn(CpuIsa isa);
// Max of the sign-cleared bit patterns of n contiguous elements (see
// kernels::cpu::non_finite_bits): the fast part of the non-finite input check.
std::uint32_t max_magnitude_bits(const void* p, kernels::cpu::Elem e, std::int64_t n);
// Whether the Highway path `isa` is compiled and supported here.
bool highway_path_available(CpuIsa isa);
// Highway's name of the target HWY_DYNAMIC_DISPATCH picks ("AVX3", ...).
const char* dispatched_target_name();

// bf16 dot-product micro-kernels, or nullptr without AVX512_BF16 (CPU or build).
const kernels::cpu::Bf16DotOps* bf16_dot_ops();

}  // namespace attnkit::cpu_flash
