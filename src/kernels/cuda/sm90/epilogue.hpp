#pragma once
// The fa3 epilogue, per consumer warpgroup: finish each row's softmax
// (common/online_softmax.hpp: l, the sink term, LSE), normalise O, stage it
// in the warpgroup's own rows of the Q buffer (its Q K^T wgmmas are done; no
// other warpgroup reads those rows), then copy it out in 16-byte row chunks,
// coalesced, only rows inside the sequence.
#include "kernels/cuda/common/online_softmax.hpp"
#include "kernels/cuda/sm90/mainloop.hpp"

namespace attnkit::cuda::sm90 {

template <class Traits>
struct Fa3Epilogue {
  using T = typename Traits::T;
  static constexpr Swizzle kSw = Traits::kSwizzle;

  // `wg` is the consumer index (0..kConsumers-1), `m0` the CTA's first query row.
  static __device__ __forceinline__ void store(const AttnParams& p, const float (&o)[1][Traits::kOTiles][4],
                                               const RowState (&st)[1], float sink_log2, bool has_sink,
                                               unsigned char* sQ_generic, int wg, int m0,
                                               const DeviceSpan& span, T* out_base, std::int64_t out_row_stride,
                                               std::int64_t lse_offset, std::int64_t lse_row_stride) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int wg_row0 = 64 * wg;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const RowTotal total = finish_row(st[0].m[r], st[0].l[r], has_sink, sink_log2);
      const int tile_row = wg_row0 + 16 * warp + g + 8 * r;
#pragma unroll
      for (int j = 0; j < Traits::kOTiles; ++j)
        *reinterpret_cast<std::uint32_t*>(sQ_generic + tile_offset(kSw, Traits::kBlockM, tile_row, 8 * j + 2 * t)) =
            pack2<T>(o[0][j][2 * r] * total.inv_l, o[0][j][2 * r + 1] * total.inv_l);
      const int row = m0 + tile_row;
      if (p.lse != nullptr && t == 0 && row < span.q_len) p.lse[lse_offset + row * lse_row_stride] = total.lse;
    }
    named_barrier_sync(1 + wg, 128);  // the warpgroup's staged rows are complete
    constexpr int kChunksPerRow = Traits::kHeadDimV / 8;
    constexpr int kChunks = 64 * kChunksPerRow;
    static_assert(kChunks % 128 == 0, "whole passes of the warpgroup over its 64 rows");
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int c = tid; c < kChunks; c += 128) {
      const int local = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const int row = m0 + wg_row0 + local;
      if (row < span.q_len)
        *reinterpret_cast<uint4*>(out_base + row * out_row_stride + col) =
            *reinterpret_cast<const uint4*>(sQ_generic + tile_offset(kSw, Traits::kBlockM, wg_row0 + local, col));
    }
  }
};

}  // namespace attnkit::cuda::sm90
