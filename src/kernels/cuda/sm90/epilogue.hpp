#pragma once
// The fa3 epilogue, per consumer warpgroup: finish each row's softmax
// (common/online_softmax.hpp: l, the sink term, LSE), normalise O and store
// it straight from the accumulators, only rows inside the sequence. No
// shared-memory staging: Q's buffer is already loading the next tile (a
// persistent CTA), and the stores are fire-and-forget while the next tile's
// first Q K^T runs.
#include "kernels/cuda/common/online_softmax.hpp"
#include "kernels/cuda/sm90/mainloop.hpp"

namespace attnkit::cuda::sm90 {

template <class Traits>
struct Fa3Epilogue {
  using T = typename Traits::T;

  // `wg` is the consumer index (0..kConsumers-1), `m0` the tile's first query
  // row; `poison`: the tile read a page outside the cache, its rows are NaN.
  // kRaster (fa3bsr): row s of the tile order is stored at raster_index(s),
  // computed on `raster` (the launch's divisors).
  template <bool kRaster = false>
  static __device__ __forceinline__ void store(const AttnParams& p, const float (&o)[1][Traits::kOTiles][4],
                                               const RowState (&st)[1], float sink_log2, bool has_sink, int wg,
                                               int m0, const DeviceSpan& span, T* out_base,
                                               std::int64_t out_row_stride, std::int64_t lse_offset,
                                               std::int64_t lse_row_stride, bool poison = false,
                                               const RasterDivisors* raster = nullptr) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      RowTotal total = finish_row(st[0].m[r], st[0].l[r], has_sink, sink_log2);
      if (poison) total.inv_l = total.lse = NAN;
      const int row = m0 + 64 * wg + 16 * warp + g + 8 * r;
      if (row >= span.q_len) continue;
      std::int64_t at = row;
      if constexpr (kRaster)
        if (row < p.raster.video_tokens()) at = raster_row(p.raster, raster->position(row));
      T* dst = out_base + at * out_row_stride + 2 * t;
#pragma unroll
      for (int j = 0; j < Traits::kOTiles; ++j)
        *reinterpret_cast<std::uint32_t*>(dst + 8 * j) =
            pack2<T>(o[0][j][2 * r] * total.inv_l, o[0][j][2 * r + 1] * total.inv_l);
      if (p.lse != nullptr && t == 0) p.lse[lse_offset + at * lse_row_stride] = total.lse;
    }
  }
};

}  // namespace attnkit::cuda::sm90
