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

  // Normalises this warp's rows into its own slice of the Q buffer (which only
  // this warp reads, so a warp barrier suffices), then copies them out in
  // 16-byte row chunks: whole 32-byte sectors instead of the scattered
  // 4-byte stores the mma fragment layout would give.
  static __device__ __forceinline__ void store(const AttnParams& p,
                                               const float (&o_all)[Traits::kMTiles][Traits::kOTiles][4],
                                               const OnlineSoftmax (&st_all)[Traits::kMTiles], float sink_log2,
                                               bool has_sink, unsigned char* smem_warp, T* out_base,
                                               std::int64_t out_row_stride,
                                               int warp_row0, int q_len, std::int64_t lse_offset,
                                               std::int64_t lse_row_stride) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mr = 0; mr < 2 * Traits::kMTiles; ++mr) {
      const int m = mr >> 1, r = mr & 1;
      const auto& o = o_all[m];
      const OnlineSoftmax& st = st_all[m];
      float l = quad_sum(st.l[r]);
      const float m_sub = st.m[r] == -INFINITY ? 0.0f : st.m[r];
      if (has_sink) l += fast_exp2(sink_log2 - m_sub);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int local_row = 16 * m + g + 8 * r;
#pragma unroll
      for (int dt = 0; dt < Traits::kOTiles; ++dt)
        *reinterpret_cast<std::uint32_t*>(smem_warp + tile_offset<Traits>(local_row, dt * 8 + 2 * t)) =
            pack2<T>(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
      const int row = warp_row0 + local_row;
      if (p.lse != nullptr && t == 0 && row < q_len)
        p.lse[lse_offset + row * lse_row_stride] = l > 0.0f ? st.m[r] * kLn2 + logf(l) : -INFINITY;
    }
    __syncwarp();
    constexpr int kChunks = Traits::kWarpRows * Traits::kChunksPerRow;
    static_assert(kChunks % 32 == 0, "whole warp passes over the warp's rows");
#pragma unroll
    for (int c = lane; c < kChunks; c += 32) {
      const int local_row = c / Traits::kChunksPerRow, col = (c % Traits::kChunksPerRow) * 8;
      const int row = warp_row0 + local_row;
      if (row < q_len)
        *reinterpret_cast<uint4*>(out_base + row * out_row_stride + col) =
            *reinterpret_cast<const uint4*>(smem_warp + tile_offset<Traits>(local_row, col));
    }
  }
};

}  // namespace attnkit::cuda
