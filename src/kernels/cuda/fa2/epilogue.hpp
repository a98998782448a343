#pragma once
// The fa2 epilogue: finish the softmax (quad-reduce l, add the sink term),
// normalise O, store it in the input dtype, and store the natural-log LSE.
//   l_total = sum_j 2^(s_j - m) + 2^(sink - m)     (sink in log2 units)
//   O = O / l_total,  LSE = ln 2 * m + ln(l_total)   (a row with no visible key: O = 0, LSE = -inf)
#include <cmath>

#include "kernels/cuda/fa2/mainloop.hpp"

namespace attnkit::cuda {

template <class Traits>
struct Fa2Epilogue {
  using T = typename Traits::T;

  static __device__ __forceinline__ void store(const AttnParams& p,
                                               const float (&o_all)[Traits::kMTiles][Traits::kOTiles][4],
                                               const OnlineSoftmax (&st_all)[Traits::kMTiles], float sink_log2,
                                               bool has_sink, T* out_base, std::int64_t out_row_stride,
                                               int warp_row0, int q_len, std::int64_t lse_offset,
                                               std::int64_t lse_row_stride) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int mr = 0; mr < 2 * Traits::kMTiles; ++mr) {
      const int m = mr >> 1, r = mr & 1;
      const auto& o = o_all[m];
      const OnlineSoftmax& st = st_all[m];
      float l = quad_sum(st.l[r]);
      const float m_sub = st.m[r] == -INFINITY ? 0.0f : st.m[r];
      if (has_sink) l += fast_exp2(sink_log2 - m_sub);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int row = warp_row0 + 16 * m + g + 8 * r;
      if (row >= q_len) continue;
      T* dst = out_base + row * out_row_stride + 2 * t;
#pragma unroll
      for (int dt = 0; dt < Traits::kOTiles; ++dt)
        *reinterpret_cast<std::uint32_t*>(dst + dt * 8) = pack2<T>(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
      if (p.lse != nullptr && t == 0)
        p.lse[lse_offset + row * lse_row_stride] = l > 0.0f ? st.m[r] * kLn2 + logf(l) : -INFINITY;
    }
  }
};

}  // namespace attnkit::cuda
