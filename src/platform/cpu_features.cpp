#include <cpuid.h>

#include <fstream>
#include <string>
#include <thread>

#include "attnkit/platform/platform.hpp"

namespace attnkit {
namespace {

// XCR0 tells whether the OS saves the wide register state the ISA needs.
unsigned long long read_xcr0() {
  unsigned int eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  f.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  f.model = cpu_model_name();
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool fma = (c >> 12) & 1;
  if (!osxsave) return f;
  const unsigned long long xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = ymm_state && ((b >> 5) & 1);
  f.fma = ymm_state && fma;
  f.avx512f = zmm_state && ((b >> 16) & 1);
  f.avx512bw = zmm_state && ((b >> 30) & 1);
  f.avx512_fp16 = zmm_state && ((d >> 23) & 1);
  f.amx_bf16 = amx_state && ((d >> 22) & 1);
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = zmm_state && ((a >> 5) & 1);
  return f;
}

}  // namespace attnkit
