#pragma once
// `cpu_flash`: tiled online-softmax attention on the CPU. SIMD through Highway
// with run-time ISA dispatch (scalar emulation, AVX2, AVX-512), bf16 dot
// products (vdpbf16ps) on CPUs with AVX512_BF16, OpenMP threads over
// (batch, head, q tile). fp32 / fp16 / bf16 inputs, fp32 accumulation.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "attnkit/backends/backend.hpp"

namespace attnkit {

// Instruction-set paths of cpu_flash. `best` lets Highway pick at run time (and
// uses bf16 dot products when the CPU has them); the others force one path.
enum class CpuIsa : std::uint8_t {
  best,
  emu128,       // portable 128-bit emulation (no SIMD assumptions)
  avx2,         // AVX2 + FMA
  avx512,       // AVX-512 F/BW/DQ/VL, fp32 FMAs for every dtype
  avx512_bf16,  // AVX-512 plus vdpbf16ps for bf16 inputs with even head dims
};
std::string_view cpu_isa_name(CpuIsa isa);

// The forced paths this binary compiled and this CPU can run (best excluded).
std::vector<CpuIsa> cpu_flash_isas();
// The path `best` resolves to on this machine.
CpuIsa cpu_flash_best_isa();

struct CpuFlashOptions {
  CpuIsa isa = CpuIsa::best;  // a forced path must be in cpu_flash_isas()
  int threads = 0;            // 0: host_threads() when planning
};

std::unique_ptr<Backend> make_cpu_flash_backend(CpuFlashOptions options = {});

}  // namespace attnkit
