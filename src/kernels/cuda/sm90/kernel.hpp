#pragma once
// fa3: FlashAttention-3-class forward for sm_90a, composed of the tile
// scheduler (common/, shared with fa2), the warp-specialised mainloop
// (mainloop.hpp: a TMA producer warpgroup, wgmma consumer warpgroups) and the
// epilogue (epilogue.hpp). The body compiles only for sm_90a; other targets
// get an empty kernel that the host never launches (plan() refuses them).
#include "kernels/cuda/common/tile_scheduler.hpp"
#include "kernels/cuda/sm90/epilogue.hpp"
#include "kernels/cuda/sm90/mainloop.hpp"
#include "kernels/cuda/sm90/traits.hpp"

namespace attnkit::cuda::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) fa3_forward_kernel(const __grid_constant__ Fa3Params params) {
#if defined(AK_SM90_ENABLED)
  using T = typename Traits::T;
  const AttnParams& p = params.a;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Swizzle atoms need 1024-byte alignment; the allocation has the slack.
  const std::uint32_t raw = smem_addr(smem_raw);
  const std::uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
  const Fa3Smem<Traits> sm{raw + pad};

  // ---- which tile, and where its rows live
  const Tile tile = TileScheduler<Traits::kBlockM>::current();
  const DeviceSpan span = sequence_span(p, tile.batch);
  const int m0 = tile.m_block * Traits::kBlockM;
  if (m0 >= span.q_len) return;  // varlen: this sequence is shorter than the longest
  const bool packed = p.layout == Layout::thd;
  const Fa3Coords at{packed ? static_cast<int>(span.q_offset) : 0, packed ? static_cast<int>(span.k_offset) : 0,
                     tile.head, tile.head / p.gqa_ratio, packed ? 0 : tile.batch};
  const KeyTiles tiles = visible_key_tiles(m0, Traits::kBlockM, span.q_len, span.k_len, p.window_left,
                                           p.window_right, Traits::kBlockN);

  if (threadIdx.x == 0) sm.init_barriers();
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_release<Traits::kProducerRegs>();
    if (threadIdx.x / 32 == 0 && elect_one_lane()) Fa3Producer<Traits>::run(params, sm, at, m0, tiles);
  } else {
    regs_claim<Traits::kConsumerRegs>();
    const int wg = warpgroup - 1, wg_row0 = 64 * wg;
    const int strip_row0 = m0 + wg_row0 + 16 * ((threadIdx.x / 32) & 3);
    const KeyTiles wg_tiles = visible_key_tiles(m0 + wg_row0, 64, span.q_len, span.k_len, p.window_left,
                                                p.window_right, Traits::kBlockN);
    const bool has_sink = p.sinks != nullptr;
    const float sink_log2 = has_sink ? p.sinks[tile.head * p.sinks_stride] * kLog2e : 0.0f;
    RowState st[1];
    st[0].m[0] = st[0].m[1] = has_sink ? sink_log2 : -INFINITY;  // the sink joins the running max from the start
    st[0].l[0] = st[0].l[1] = 0.0f;
    float o[1][Traits::kOTiles][4];
#pragma unroll
    for (int j = 0; j < Traits::kOTiles; ++j) o[0][j][0] = o[0][j][1] = o[0][j][2] = o[0][j][3] = 0.0f;

    Fa3Consumer<Traits>::run(p, sm, o, st, tiles, wg_tiles, wg_row0, strip_row0, span);

    const HeadRows o_rows = head_rows(p.layout, p.out_strides, tile.batch, tile.head, span.q_offset);
    const std::int64_t lse_offset = packed ? tile.head * p.lse_strides[0] + span.q_offset * p.lse_strides[1]
                                           : tile.batch * p.lse_strides[0] + tile.head * p.lse_strides[1];
    const std::int64_t lse_row_stride = packed ? p.lse_strides[1] : p.lse_strides[2];
    Fa3Epilogue<Traits>::store(p, o, st, sink_log2, has_sink, smem_raw + pad, wg, m0, span,
                               static_cast<T*>(p.out) + o_rows.offset, o_rows.row_stride, lse_offset, lse_row_stride);
  }
#else
  (void)params;
#endif
}

}  // namespace attnkit::cuda::sm90
