#pragma once
// The fa3 epilogue, per consumer warpgroup: finish each row's softmax
// (common/online_softmax.hpp: l, the sink term, LSE), normalise O and store
// it, only rows inside the sequence. Two ways to store O:
//  - store_tma (Traits::kStoreOTma, bench variants `_tmao` until a GPU call
//    runs parity and racecheck on it): stmatrix into a staging tile of its
//    own in TMA's swizzle, then one TMA box per column block
//    (FlashAttention-3's epilogue). H100, 2026-12-07, two calls: d128 causal
//    s512 / s1k +2.6-4.3%, full s512 +2.2%, +-0.5% at longer rows.
//  - store (every shipped instance, and calls whose output no map can
//    address: THD, unaligned strides): from the accumulators, the four
//    threads of a row transposing their words with shuffles so that each
//    stores whole 16-byte column blocks. Stored as the accumulator layout
//    gives them (4 bytes a thread, 32 stores), the stores filled the
//    load/store queue: at d128 causal s1k the warps waited on them for about
//    1.6 us an output tile more than FlashAttention-3's (ncu stall samples,
//    2026-12-05).
#include "kernels/cuda/common/online_softmax.hpp"
#include "kernels/cuda/sm90/mainloop.hpp"

namespace attnkit::cuda::sm90 {

template <class Traits>
struct Fa3Epilogue {
  using T = typename Traits::T;
  static_assert(Traits::kOTiles % 4 == 0, "v head dim: a multiple of 32 (a 16-byte column block per quad lane)");

  // Row r's softmax total; NaN (O and LSE) when the tile is poisoned.
  static __device__ __forceinline__ RowTotal row_total(const RowState (&st)[1], int r, bool has_sink,
                                                       float sink_log2, bool poison) {
    RowTotal total = finish_row(st[0].m[r], st[0].l[r], has_sink, sink_log2);
    if (poison) total.inv_l = total.lse = NAN;
    return total;
  }
  // The quad's first lane writes a stored row's LSE, at output row `at`.
  static __device__ __forceinline__ void store_lse(const AttnParams& p, std::int64_t lse_offset,
                                                   std::int64_t lse_row_stride, std::int64_t at, float lse,
                                                   bool stored) {
    if (p.lse != nullptr && (threadIdx.x & 3) == 0 && stored) p.lse[lse_offset + at * lse_row_stride] = lse;
  }

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
      const RowTotal total = row_total(st, r, has_sink, sink_log2, poison);
      const int row = m0 + 64 * wg + 16 * warp + g + 8 * r;  // the accumulator's rows g, g + 8 of the warp's 16
      const bool stored = row < span.q_len;  // the quad's lanes share the row: all shuffle, or none store
      std::uint32_t row_words[Traits::kOTiles];
#pragma unroll
      for (int j = 0; j < Traits::kOTiles; ++j)
        row_words[j] = pack2<T>(o[0][j][2 * r] * total.inv_l, o[0][j][2 * r + 1] * total.inv_l);
      std::int64_t at = row;
      if constexpr (kRaster)
        if (row < p.raster.video_tokens()) at = raster_row(p.raster, raster->position(row));
      T* dst = out_base + at * out_row_stride + 8 * t;
#pragma unroll
      for (int k = 0; k < Traits::kOTiles / 4; ++k) {
        const uint4 block = quad_transpose(row_words[4 * k], row_words[4 * k + 1], row_words[4 * k + 2],
                                           row_words[4 * k + 3], t);
        if (stored) *reinterpret_cast<uint4*>(dst + 32 * k) = block;
      }
      store_lse(p, lse_offset, lse_row_stride, at, total.lse, stored);
    }
  }

  // kStoreOTma (FlashAttention-3's epilogue): the warpgroup's 64 rows go to
  // O's staging tile with stmatrix (in the swizzle TMA reads), then its first
  // thread stores them with one TMA box per column block; rows past the
  // sequence fall outside the map and are not written. Before writing the
  // staging rows, the warpgroup waits until its previous tile's boxes have
  // been read out of them. `o_row0`: the tile's first row in the map.
  static __device__ __forceinline__ void store_tma(const Fa3Params& params, std::uint32_t staging,
                                                   const float (&o)[1][Traits::kOTiles][4], const RowState (&st)[1],
                                                   float sink_log2, bool has_sink, int wg, int m0,
                                                   const DeviceSpan& span, int o_row0, int head, int batch,
                                                   std::int64_t lse_offset, std::int64_t lse_row_stride,
                                                   bool poison) {
    const AttnParams& p = params.a;
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2;
    // stmatrix's register i: row g (i even) or g + 8 (i odd), columns 2t, 2t + 1 of
    // 8-column tile j (i < 2) or j + 1: the accumulator's o[j][0..1], o[j][2..3], ...
    const bool leader = (threadIdx.x & 127) == 0;
    float inv_l[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const RowTotal total = row_total(st, r, has_sink, sink_log2, poison);
      inv_l[r] = total.inv_l;
      const int row = m0 + 64 * wg + 16 * warp + g + 8 * r;
      store_lse(p, lse_offset, lse_row_stride, row, total.lse, row < span.q_len);
    }
    if (leader) tma_store_wait_read();
    named_barrier_sync(Traits::kEpilogueBarrier0 + wg, 128);
#pragma unroll
    for (int j = 0; j < Traits::kOTiles; j += 2)
      stmatrix_x4(staging + o_staging_offset(Traits::kSwizzle, Traits::kBlockM, wg, warp, lane, j),
                  pack2<T>(o[0][j][0] * inv_l[0], o[0][j][1] * inv_l[0]),
                  pack2<T>(o[0][j][2] * inv_l[1], o[0][j][3] * inv_l[1]),
                  pack2<T>(o[0][j + 1][0] * inv_l[0], o[0][j + 1][1] * inv_l[0]),
                  pack2<T>(o[0][j + 1][2] * inv_l[1], o[0][j + 1][3] * inv_l[1]));
    fence_proxy_async();  // the rows, visible to the TMA unit
    named_barrier_sync(Traits::kEpilogueBarrier0 + wg, 128);
    if (leader) {
#pragma unroll
      for (int c = 0; c < Traits::kVBlocks; ++c)
        tma_store_4d(&params.tma_o,
                     staging + static_cast<std::uint32_t>((c * Traits::kBlockM + 64 * wg) * Traits::kSwizzleBytes),
                     c * Traits::kBlockCols, o_row0 + m0 + 64 * wg, head, batch);
      tma_store_commit();
    }
  }

  // Thread t of a quad holds word i of column blocks 4k .. 4k + 3 of its row
  // (columns 8 (4k + i) + 2t, + 1); returns the four words of column block
  // 4k + t, in column order. Two butterfly rounds, each swapping half of the
  // words with lane t ^ 1, then t ^ 2. All four lanes must call it.
  static __device__ __forceinline__ uint4 quad_transpose(std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                                         std::uint32_t a3, int t) {
    const bool b0 = t & 1, b1 = (t >> 1) & 1;
    // Round 1: keep the blocks whose bit 0 is b0, give the others to t ^ 1.
    const std::uint32_t keep0 = b0 ? a1 : a0, keep1 = b0 ? a3 : a2;
    const std::uint32_t got0 = __shfl_xor_sync(0xffffffffu, b0 ? a0 : a1, 1);
    const std::uint32_t got1 = __shfl_xor_sync(0xffffffffu, b0 ? a2 : a3, 1);
    // v[h][e]: block 2h + b0, word of lane (t & 2) | e.
    const std::uint32_t v00 = b0 ? got0 : keep0, v01 = b0 ? keep0 : got0;
    const std::uint32_t v10 = b0 ? got1 : keep1, v11 = b0 ? keep1 : got1;
    // Round 2: keep block t (h = b1), give the other block's two words to t ^ 2.
    const std::uint32_t mine0 = b1 ? v10 : v00, mine1 = b1 ? v11 : v01;
    const std::uint32_t far0 = __shfl_xor_sync(0xffffffffu, b1 ? v00 : v10, 2);
    const std::uint32_t far1 = __shfl_xor_sync(0xffffffffu, b1 ? v01 : v11, 2);
    // Words of lanes 0..3: lanes (t & 2) | e are this thread's pair.
    return b1 ? make_uint4(far0, far1, mine0, mine1) : make_uint4(mine0, mine1, far0, far1);
  }
};

}  // namespace attnkit::cuda::sm90
