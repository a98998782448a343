// The AVX512_BF16 micro-kernels, compiled with the AVX-512 BF16 flags (see
// CMakeLists.txt); only called after a run-time CPU check.
#include "kernels/cpu/bf16_dot_avx512.hpp"

namespace attnkit::cpu_flash {

const kernels::cpu::Bf16DotOps* avx512bf16_dot_ops_unchecked() { return &kernels::cpu::avx512bf16::ops(); }

}  // namespace attnkit::cpu_flash
