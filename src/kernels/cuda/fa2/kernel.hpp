#pragma once
// fa2: FlashAttention-2-class forward for sm_80 and later, composed of the tile
// scheduler (which tile), the mainloop (Q K^T, mask, online softmax, P V over a
// cp.async ring of key tiles) and the epilogue (normalise, store O and LSE).
#include <type_traits>

#include "kernels/cuda/common/key_tiles.hpp"
#include "kernels/cuda/common/lying_metadata.hpp"
#include "kernels/cuda/fa2/epilogue.hpp"
#include "kernels/cuda/fa2/mainloop.hpp"
#include "kernels/cuda/common/tile_scheduler.hpp"
#include "kernels/cuda/fa2/scores.hpp"
#include "kernels/cuda/fa2/traits.hpp"

namespace attnkit::cuda {

// kBlockSparse: the key tiles are the block-sparse lists' (AttnParams
// block_offsets / block_indices) within the dense range. Scores: what else
// enters the raw scores after fa2's mask (fa2/scores.hpp).
template <class Traits, bool kBlockSparse = false, class Scores = PlainScores>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm) fa2_forward_kernel(const __grid_constant__ AttnParams p) {
  using T = typename Traits::T;
  using Mainloop = Fa2Mainloop<Traits>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kStages = Traits::kStages;

  // Shared memory: Q, then kStages x (K, V). Tiles are addressed by 32-bit
  // shared-window byte addresses (sm80_primitives.hpp says why).
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const std::uint32_t sQ = smem_addr(smem_raw);
  auto sK = [&](int stage) { return static_cast<std::uint32_t>(sQ + Traits::kQBytes + stage * Traits::kStageBytes); };
  auto sV = [&](int stage) { return static_cast<std::uint32_t>(sK(stage) + Traits::kKvTileBytes); };

  // ---- which tile, and where its rows live
  const Tile tile = TileScheduler<kBlockM>::current();
  const DeviceSpan span = sequence_span(p, tile.batch);
  // Device metadata that disagrees with the problem: NaN everywhere, nothing computed.
  if (call_lies(p, Traits::kThreads)) {
    poison_call_part<T>(p, cta_index(), cta_count(), static_cast<int>(threadIdx.x), Traits::kThreads);
    return;
  }
  const int m0 = tile.m_block * kBlockM;
  if (m0 >= span.q_len) return;  // varlen: this sequence is shorter than the longest
  const int head_kv = tile.head / p.gqa_ratio;
  const HeadRows q_rows = head_rows(p.layout, p.q_strides, tile.batch, tile.head, span.q_offset);
  const HeadRows k_rows = head_rows(p.layout, p.k_strides, tile.batch, head_kv, span.k_offset);
  const HeadRows v_rows = head_rows(p.layout, p.v_strides, tile.batch, head_kv, span.k_offset);
  const HeadRows o_rows = head_rows(p.layout, p.out_strides, tile.batch, tile.head, span.q_offset);
  const T* q_base = static_cast<const T*>(p.q) + q_rows.offset;
  const T* k_base = static_cast<const T*>(p.k) + k_rows.offset;
  const T* v_base = static_cast<const T*>(p.v) + v_rows.offset;

  // ---- the key tiles any row of this block can see (block-sparse: of those, the listed ones)
  const KeyTiles range = visible_key_tiles(m0, kBlockM, span.q_len, span.k_len, p.window_left, p.window_right, kBlockN);
  const KeyRange first = range.first, last = range.last;
  using Keys = std::conditional_t<kBlockSparse, SparseKeyTiles, KeyTiles>;
  Keys keys;
  if constexpr (kBlockSparse)
    keys = listed_key_tiles(p, range, tile.batch, tile.head, m0);
  else
    keys = range;
  const int count = keys.count();

  const int warp = threadIdx.x >> 5;
  constexpr int kM = Traits::kMTiles;
  const int warp_row0 = m0 + warp * Traits::kWarpRows;
  constexpr std::uint32_t kWarpQBytes = Traits::kWarpRows * Traits::kRowBytes;
  const std::uint32_t sQ_warp = sQ + warp * kWarpQBytes;

  const bool has_sink = p.sinks != nullptr;
  const float sink_log2 = has_sink ? p.sinks[tile.head * p.sinks_stride] * kLog2e : 0.0f;
  const float m_init = has_sink ? sink_log2 : -INFINITY;  // the sink joins the running max from the start
  OnlineSoftmax st[kM];
  float o[kM][Traits::kOTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    st[m].m[0] = st[m].m[1] = m_init;
    st[m].l[0] = st[m].l[1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < Traits::kOTiles; ++dt) o[m][dt][0] = o[m][dt][1] = o[m][dt][2] = o[m][dt][3] = 0.0f;
  }
  std::uint32_t q_regs[kM][Traits::kQInRegisters ? Traits::kKSteps : 1][4];

  // ---- prologue: Q and the first kStages-1 key tiles in flight (one commit group each)
  const TileLoader<Traits, kBlockN> k_loader{k_base, k_rows.row_stride};
  const TileLoader<Traits, kBlockN> v_loader{v_base, v_rows.row_stride};
  auto load_kv = [&](int n, int stage) {
    k_loader.load(sK(stage), n * kBlockN, span.k_len);
    v_loader.load(sV(stage), n * kBlockN, span.k_len);
  };
  TileLoader<Traits, kBlockM>{q_base, q_rows.row_stride}.load(sQ, m0, span.q_len);
  if constexpr (Traits::kSingleBuffered) {  // group {Q, K(first)}
    if (count > 0) k_loader.load(sK(0), keys.tile(0) * kBlockN, span.k_len);
    cp_async_commit();
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < count) load_kv(keys.tile(s), s);
      cp_async_commit();
    }
  }

  // ---- mainloop over key tiles
  for (int it = 0; it < count; ++it) {
    const int n = keys.tile(it);
    const int stage = it % kStages;
    const bool load_ahead = it + kStages - 1 < count;  // ring: the (it+kStages-1)-th tile exists
    const int ahead_stage = (it + kStages - 1) % kStages;
    const int ahead = load_ahead ? keys.tile(it + kStages - 1) : 0;
    if constexpr (Traits::kSingleBuffered) {
      cp_async_wait<0>();  // K(n) (and Q) landed for this thread...
      __syncthreads();     // ...and for all; every warp is done with V(n-1)
      v_loader.load(sV(0), n * kBlockN, span.k_len);
      cp_async_commit();
    } else {
      cp_async_wait<kStages - 2>();  // tile n (and Q) landed for this thread...
      __syncthreads();               // ...and for all; tile n-1's buffers are free again
      // Tile n+kStages-1 goes into the buffer tile n-1 left: K now, V after
      // this tile's Q K^T, so the copies interleave with math instead of
      // queueing behind each other (ncu showed warps waiting to reuse
      // cp.async address registers when all were issued at once).
      if (load_ahead) k_loader.load(sK(ahead_stage), ahead * kBlockN, span.k_len);
    }
    if constexpr (Traits::kQInRegisters) {
      if (it == 0)
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int ks = 0; ks < Traits::kKSteps; ++ks) Mainloop::load_q_fragment(q_regs[m][ks], sQ_warp, m, ks);
    }

    float s[kM][Traits::kSTiles][4];
    Mainloop::qk(s, q_regs, sQ_warp, sK(stage));
    if constexpr (Traits::kSingleBuffered) {
      cp_async_wait<0>();  // V(n) landed for this thread...
      __syncthreads();     // ...and for all; every warp is done with K(n)
      if (it + 1 < count) k_loader.load(sK(0), keys.tile(it + 1) * kBlockN, span.k_len);
    } else {
      if (load_ahead) v_loader.load(sV(ahead_stage), ahead * kBlockN, span.k_len);
    }
    cp_async_commit();  // one group per tile, empty or not: the waits count groups
    const bool capped = p.softcap_log2 > 0.0f;  // uniform: one branch, not a select per score
    if (capped) Mainloop::apply_softcap(s, p);
    // Interior tiles (every row sees every key) skip the per-element mask.
    const int key0 = n * kBlockN;
    const bool interior = last.lo <= key0 && first.hi >= key0 + kBlockN;
    if (!interior) Mainloop::apply_mask(s, key0, warp_row0, span.q_len, span.k_len, p.window_left, p.window_right);
    if constexpr (Scores::kModifies) Scores::template apply<Traits>(s, p, tile.batch, tile.head, m0, key0);
    typename Mainloop::VFrags v_frags;
    if constexpr (Traits::kRescaleThreshold > 0) Mainloop::pv_first_loads(v_frags, sV(stage));
    Mainloop::online_softmax(s, o, st, capped ? 1.0f : p.scale_log2);
    if constexpr (Traits::kRescaleThreshold == 0) Mainloop::pv_first_loads(v_frags, sV(stage));
    Mainloop::pv(o, s, sV(stage), v_frags);
  }
  cp_async_wait<0>();
  // The epilogue reuses each warp's Q rows as staging; other threads' Q copies
  // must have landed (a block that saw no key tile never passed the loop's barrier).
  __syncthreads();

  // ---- epilogue
  const std::int64_t lse_offset = p.layout == Layout::thd
                                      ? tile.head * p.lse_strides[0] + span.q_offset * p.lse_strides[1]
                                      : tile.batch * p.lse_strides[0] + tile.head * p.lse_strides[1];
  const std::int64_t lse_row_stride = p.layout == Layout::thd ? p.lse_strides[1] : p.lse_strides[2];
  unsigned char* sQ_warp_staging = smem_raw + warp * kWarpQBytes;
  Fa2Epilogue<Traits>::store(p, o, st, sink_log2, has_sink, sQ_warp_staging, static_cast<T*>(p.out) + o_rows.offset,
                             o_rows.row_stride, warp_row0, span.q_len, lse_offset, lse_row_stride);
}

}  // namespace attnkit::cuda
