#pragma once
// fa3: FlashAttention-3-class forward for sm_90a, composed of the tile
// scheduler (common/, shared with fa2), the warp-specialised mainloop
// (mainloop.hpp: a TMA producer warpgroup, wgmma consumer warpgroups) and the
// epilogue (epilogue.hpp). The body compiles only for sm_90a; other targets
// get an empty kernel that the host never launches (plan() refuses them).
#include <type_traits>

#include "kernels/cuda/common/lying_metadata.hpp"
#include "kernels/cuda/common/tile_scheduler.hpp"
#include "kernels/cuda/sm90/epilogue.hpp"
#include "kernels/cuda/sm90/mainloop.hpp"
#include "kernels/cuda/sm90/traits.hpp"

namespace attnkit::cuda::sm90 {

// One output tile: where its rows live and which key tiles it visits (the
// dense range; block-sparse: that range's listed blocks).
template <bool kBlockSparse>
struct Fa3Tile {
  using Keys = std::conditional_t<kBlockSparse, SparseKeyTiles, KeyTiles>;
  Tile tile;
  DeviceSpan span;
  int m0;
  Fa3Coords at;
  Keys keys;
};

template <class Traits, bool kBlockSparse>
__device__ __forceinline__ bool fa3_tile(const Fa3Params& params, long long walk, Fa3Tile<kBlockSparse>& out) {
  using Scheduler = TileScheduler<Traits::kBlockM>;
  const AttnParams& p = params.a;
  if (params.walk.enabled)
    out.tile = params.walk.at(static_cast<std::uint32_t>(walk));
  else  // walk positions past 2^31: the 64-bit decode
    out.tile = params.cost_group <= 0 ? Scheduler::tile(walk, p)
               : params.dynamic_tiles ? Scheduler::grouped_tile(walk, params.cost_group, p)
                                      : Scheduler::cost_ordered_tile(walk, gridDim.x, params.cost_group, p);
  out.span = sequence_span(p, out.tile.batch);
  out.m0 = out.tile.m_block * Traits::kBlockM;
  if (out.m0 >= out.span.q_len) return false;  // varlen: this sequence is shorter than the longest
  const bool packed = p.layout == Layout::thd;
  out.at = {packed ? static_cast<int>(out.span.q_offset) : 0, packed ? static_cast<int>(out.span.k_offset) : 0,
            out.tile.head, out.tile.head / p.gqa_ratio, packed ? 0 : out.tile.batch};
  const KeyTiles range = visible_key_tiles(out.m0, Traits::kBlockM, out.span.q_len, out.span.k_len, p.window_left,
                                           p.window_right, Traits::kBlockN);
  if constexpr (kBlockSparse)
    out.keys = listed_key_tiles(p, range, out.tile.batch, out.tile.head, out.m0);
  else
    out.keys = range;
  return true;
}

// kBlockSparse: the key tiles come from the CSR lists of AttnParams
// (block_offsets / block_indices), intersected with the dense range.
// kPaged: K and V come from a paged cache (AttnParams::block_table). Its own
// instances: the producer's page walk spills in the producer's 24 registers
// (88 bytes at d128 with ptxas 13.0; 32 registers deadlocked setmaxnreg at
// d128, where the consumers' 2 x 240 leave no more). Every other instance is
// spill-free (ptxas 13.0, 2026-12-04).
// kRaster: video tokens in raster order (fa3bsr, raster_tokens.hpp): the
// producer reads tile-order blocks as boxes of the raster maps, the epilogue
// writes each row at its raster position; nothing else changes.
template <class Traits, bool kBlockSparse, bool kPaged = false, bool kRaster = false>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    fa3_forward_kernel(const __grid_constant__ Fa3Params params) {
#if defined(AK_SM90_ENABLED)
  using T = typename Traits::T;
  const AttnParams& p = params.a;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Swizzle atoms need 1024-byte alignment; the allocation has the slack.
  const std::uint32_t raw = smem_addr(smem_raw);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  const Fa3Smem<Traits> sm{Traits::kPinSmemBase ? opaque(base) : base};
  const long long tiles = TileScheduler<Traits::kBlockM>::num_tiles(p);

  if (threadIdx.x == 0) sm.init_barriers();
  // The barrier that publishes the barriers also decides whether the call's
  // device metadata lies: then the CTA writes NaN over its part of the output
  // and computes nothing (lying_metadata.hpp; before setmaxnreg, so the
  // producer's 24 registers do not carry it).
  if (metadata_barrier(p, Traits::kThreads)) {
    poison_call_part<T>(p, blockIdx.x, gridDim.x, static_cast<int>(threadIdx.x), Traits::kThreads);
    return;
  }

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_release<Traits::kProducerRegs>();
    if (threadIdx.x / 32 == 0 && elect_one_lane()) {
      tma_prefetch_descriptor(&params.tma_q);
      tma_prefetch_descriptor(&params.tma_k);
      tma_prefetch_descriptor(&params.tma_v);
      if constexpr (kRaster) {
        tma_prefetch_descriptor(&params.raster_q);
        tma_prefetch_descriptor(&params.raster_k);
        tma_prefetch_descriptor(&params.raster_v);
      }
      PipelineState ps;
      Fa3Tile<kBlockSparse> t;
      auto load = [&](const Fa3Tile<kBlockSparse>& t) {
        Fa3Producer<Traits>::template load_tile<kPaged, kRaster>(params, sm, t.at, {t.tile.batch, t.span.k_len}, t.m0, t.keys,
                                                        ps);
      };
      // Static: tiles blockIdx.x, blockIdx.x + gridDim.x, ... Dynamic: tile
      // blockIdx.x first, then gridDim.x + the counter's value, fetched once
      // this tile's copies are issued: the producer is then two key tiles
      // ahead of the consumers, which hides the atomic's latency, and a CTA
      // claims a tile only when it is nearly free (longest first, the short
      // tiles fill the tail). Each tile is published to the consumers before
      // its loads; tiles past a short sequence (varlen) are skipped
      // unpublished; -1 ends the consumers' walk. (One loop for both walks:
      // two copies of the body spilled.)
      const bool dynamic = params.dynamic_tiles != 0;
      int published = 0;
      for (long long linear = blockIdx.x; linear < tiles;
           linear = dynamic ? gridDim.x + static_cast<long long>(atomicAdd(p.tile_counter, 1u)) : linear + gridDim.x)
        if (fa3_tile<Traits>(params, linear, t)) {
          if (dynamic) sm.publish_tile(published++, static_cast<int>(linear));
          load(t);
        }
      if (dynamic) sm.publish_tile(published, -1);
    }
  } else {
    regs_claim<Traits::kConsumerRegs>();
    using Consumer = Fa3Consumer<Traits>;
    // The warp broadcast from lane 0, so ptxas knows it is uniform across the
    // warp and keeps what derives from it (row offsets, the key range of the
    // warpgroup's rows) in uniform registers: S, P and O hold most of the 240
    // vector registers (on 192-key tiles the interior test's bounds spilled,
    // reloaded every key tile: 2% of STA Wan's ncu samples, 2026-12-04).
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32), 0);
    const int wg = warp / 4 - 1, wg_row0 = 64 * wg;
    const bool has_sink = p.sinks != nullptr;
    const bool packed = p.layout == Layout::thd;
    Consumer::first_turn(wg);
    PipelineState ps;
    SkipRows skip{};  // skip-softmax: the rows' state per tile, the counts over the CTA's tiles
    Fa3Tile<kBlockSparse> t;
    auto compute = [&](const Fa3Tile<kBlockSparse>& t) {
      const int strip_row0 = t.m0 + wg_row0 + 16 * (warp & 3);
      const KeyTiles wg_keys = visible_key_tiles(t.m0 + wg_row0, 64, t.span.q_len, t.span.k_len, p.window_left,
                                                 p.window_right, Traits::kBlockN);
      const float sink_log2 = has_sink ? p.sinks[t.tile.head * p.sinks_stride] * kLog2e : 0.0f;
      RowState st[1];
      st[0].m[0] = st[0].m[1] = has_sink ? sink_log2 : -INFINITY;  // the sink joins the running max from the start
      st[0].l[0] = st[0].l[1] = 0.0f;
      float o[1][Traits::kOTiles][4];
#pragma unroll
      for (int j = 0; j < Traits::kOTiles; ++j) o[0][j][0] = o[0][j][1] = o[0][j][2] = o[0][j][3] = 0.0f;

      if constexpr (Traits::kSkipSoftmax) {
        // threshold = factor / (keys of the sequence), in log2 units.
        skip.log2_threshold = p.skip_log2_factor - log2f(static_cast<float>(max(1, t.span.k_len)));
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          skip.key_max[r] = -INFINITY;
          skip.valid[r] = strip_row0 + ((threadIdx.x & 31) >> 2) + 8 * r < t.span.q_len;
        }
      }

      Consumer::run(p, sm, o, st, skip, t.keys, wg_keys, wg, strip_row0, t.span, ps);
      bool poison = false;  // a paged tile that read a block-table entry outside the cache
      if constexpr (kPaged) poison = t.keys.count() > 0 && sm.page_fault((ps.q - 1) & 1);  // run() counted it

      const HeadRows o_rows = head_rows(p.layout, p.out_strides, t.tile.batch, t.tile.head, t.span.q_offset);
      const std::int64_t lse_offset = packed ? t.tile.head * p.lse_strides[0] + t.span.q_offset * p.lse_strides[1]
                                             : t.tile.batch * p.lse_strides[0] + t.tile.head * p.lse_strides[1];
      const std::int64_t lse_row_stride = packed ? p.lse_strides[1] : p.lse_strides[2];
      if constexpr (Traits::kStoreOTma && !kRaster)
        if (params.store_o_tma) {
          Fa3Epilogue<Traits>::store_tma(params, sm.o(), o, st, sink_log2, has_sink, wg, t.m0, t.span, t.at.q_row0,
                                         t.tile.head, t.at.batch, lse_offset, lse_row_stride, poison);
          return;
        }
      Fa3Epilogue<Traits>::template store<kRaster>(p, o, st, sink_log2, has_sink, wg, t.m0, t.span,
                                 static_cast<T*>(p.out) + o_rows.offset, o_rows.row_stride, lse_offset,
                                 lse_row_stride, poison, &params.raster_div);
    };
    // The producer's walk (above): dynamic tiles arrive through shared memory.
    const bool dynamic = params.dynamic_tiles != 0;
    int taken = 0;
    for (long long linear = dynamic ? sm.take_tile(taken++) : blockIdx.x; linear >= 0 && linear < tiles;
         linear = dynamic ? sm.take_tile(taken++) : linear + gridDim.x)
      if (fa3_tile<Traits>(params, linear, t)) compute(t);  // dynamic: always, only tiles with rows are published
    // O's last boxes must have left shared memory before the CTA ends.
    if constexpr (Traits::kStoreOTma)
      if ((threadIdx.x & 127) == 0) tma_store_wait_all();
    if constexpr (Traits::kSkipSoftmax)
      if (p.skip_counts != nullptr) {  // one atomic pair per warp
        unsigned long long decided = skip.decided, skipped = skip.skipped;
#pragma unroll
        for (int lane = 16; lane > 0; lane >>= 1) {
          decided += __shfl_xor_sync(0xffffffffu, decided, lane);
          skipped += __shfl_xor_sync(0xffffffffu, skipped, lane);
        }
        if ((threadIdx.x & 31) == 0) {
          atomicAdd(p.skip_counts, decided);
          atomicAdd(p.skip_counts + 1, skipped);
        }
      }
  }
#else
  (void)params;
#endif
}

}  // namespace attnkit::cuda::sm90
