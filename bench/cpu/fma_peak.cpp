// fp32 FMA peak: 16 independent accumulators per thread (more than FMA latency
// x issue width on current x86 cores), 2 FLOPs per lane per FMA.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <chrono>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns FLOPs done; `sink` keeps the result alive.
double FmaChains(long iters, float* sink) {
  const hn::ScalableTag<float> df;
  constexpr int kAcc = 16;
  auto a = hn::Set(df, 0.999999f), b = hn::Set(df, 1e-7f);
  hn::Vec<decltype(df)> acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = hn::Set(df, static_cast<float>(i));
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = hn::MulAdd(acc[i], a, b);
  auto s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = hn::Add(s, acc[i]);
  *sink = hn::GetLane(s);
  return 2.0 * kAcc * static_cast<double>(hn::Lanes(df)) * static_cast<double>(iters);
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "fma_peak.hpp"
namespace attnkit::bench {
HWY_EXPORT(FmaChains);

double fp32_fma_peak_gflops(int threads) {
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    double flops = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    {
      float sink = 0.0f;
      flops += HWY_DYNAMIC_DISPATCH(FmaChains)(20'000'000L, &sink);
      if (sink == 12345.0f) flops += 1.0;  // never true; keeps the chains live
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}
}  // namespace attnkit::bench
#endif
