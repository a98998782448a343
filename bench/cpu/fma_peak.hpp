#pragma once
// The machine's fp32 FMA peak, measured: every thread runs long chains of
// independent fused multiply-adds on the widest vectors Highway dispatches to.
namespace attnkit::bench {
double fp32_fma_peak_gflops(int threads);
}  // namespace attnkit::bench
