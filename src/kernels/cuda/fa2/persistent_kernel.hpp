#pragma once
// fa2, persistent: a grid of (SMs x CTAs per SM) CTAs, each walking its share
// of the output tiles (Fa2PersistentScheduler). Per tile the math is
// kernel.hpp's; what differs is the seam between tiles: right after the last
// Q K^T of a tile, the CTA issues the next tile's Q and first K/V copies, which
// land while it finishes this tile's softmax, P V and epilogue. A one-tile CTA
// pays that load latency with nothing to overlap it: at d256 (one 128-row CTA
// per SM) about two key tiles' worth of time per CTA, 10% at 512 keys.
//
// Shared memory is kernel.hpp's (Q, then a two-stage K+V ring). The epilogue
// stages O through the last key tile's K+V stage instead of the Q buffer,
// which by then receives the next tile's Q.
#include "kernels/cuda/fa2/epilogue.hpp"
#include "kernels/cuda/fa2/mainloop.hpp"
#include "kernels/cuda/fa2/tile_scheduler.hpp"
#include "kernels/cuda/fa2/traits.hpp"

namespace attnkit::cuda {

// One output tile: its rows, and the key tiles [n_begin, n_end) any of them sees.
template <class Traits>
struct Fa2TileGeometry {
  Fa2Tile tile;
  DeviceSpan span;
  int m0, n_begin, n_end;
  KeyRange first, last;  // visible keys of the tile's first and last row

  static __device__ __forceinline__ Fa2TileGeometry make(const AttnParams& p, Fa2Tile tile) {
    Fa2TileGeometry g;
    g.tile = tile;
    g.span = sequence_span(p, tile.batch);
    g.m0 = tile.m_block * Traits::kBlockM;
    const int m_last = min(g.m0 + Traits::kBlockM, g.span.q_len) - 1;
    g.first = visible_keys(g.m0, g.span.q_len, g.span.k_len, p.window_left, p.window_right);
    g.last = visible_keys(m_last, g.span.q_len, g.span.k_len, p.window_left, p.window_right);
    g.n_begin = g.first.lo / Traits::kBlockN;
    g.n_end = g.last.hi > g.first.lo ? (g.last.hi + Traits::kBlockN - 1) / Traits::kBlockN : g.n_begin;
    return g;
  }
  __device__ __forceinline__ HeadRows rows(const AttnParams& p, const std::int64_t* strides, int head,
                                           std::int64_t offset) const {
    return head_rows(p.layout, strides, tile.batch, head, offset);
  }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    fa2_persistent_kernel(const __grid_constant__ AttnParams p) {
  using T = typename Traits::T;
  using Mainloop = Fa2Mainloop<Traits>;
  using Geometry = Fa2TileGeometry<Traits>;
  using Schedule = Fa2PersistentScheduler<Traits::kBlockM>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  static_assert(Traits::kStages == 2, "the persistent kernel runs the two-stage K+V ring");
  static_assert(!Traits::kQInRegisters, "the persistent kernel reads Q from shared memory");
  static_assert(kBlockM <= 2 * kBlockN, "the epilogue stages a tile's O in one K+V stage");

  extern __shared__ __align__(128) unsigned char smem_raw[];
  const std::uint32_t sQ = smem_addr(smem_raw);
  auto sK = [&](int stage) { return static_cast<std::uint32_t>(sQ + Traits::kQBytes + stage * Traits::kStageBytes); };
  auto sV = [&](int stage) { return static_cast<std::uint32_t>(sK(stage) + Traits::kKvTileBytes); };

  const int warp = threadIdx.x >> 5;
  constexpr int kM = Traits::kMTiles;
  constexpr std::uint32_t kWarpQBytes = Traits::kWarpRows * Traits::kPitch * sizeof(T);
  const std::uint32_t sQ_warp = sQ + warp * kWarpQBytes;

  // The first round >= k whose tile has rows (varlen: query blocks past a
  // sequence's end are skipped); -1 when this CTA has no more tiles.
  const int tiles = Schedule::num_tiles(p);
  auto next_round = [&](int k) {
    for (;; ++k) {
      const int t = Schedule::position(p, k);
      if (t >= tiles) return -1;
      const Fa2Tile tile = Schedule::tile(p, t);
      if (tile.m_block * kBlockM < sequence_span(p, tile.batch).q_len) return k;
    }
  };
  // Q and the first key tile of round k's tile into sQ and `stage` (no commit:
  // the caller's commit closes the group).
  auto issue_prologue = [&](int k, int stage) {
    const Geometry g = Geometry::make(p, Schedule::tile(p, Schedule::position(p, k)));
    const HeadRows q_rows = g.rows(p, p.q_strides, g.tile.head, g.span.q_offset);
    TileLoader<Traits, kBlockM>{static_cast<const T*>(p.q) + q_rows.offset, q_rows.row_stride}.load(sQ, g.m0,
                                                                                                      g.span.q_len);
    if (g.n_begin < g.n_end) {
      const int head_kv = g.tile.head / p.gqa_ratio;
      const HeadRows k_rows = g.rows(p, p.k_strides, head_kv, g.span.k_offset);
      const HeadRows v_rows = g.rows(p, p.v_strides, head_kv, g.span.k_offset);
      TileLoader<Traits, kBlockN>{static_cast<const T*>(p.k) + k_rows.offset, k_rows.row_stride}.load(
          sK(stage), g.n_begin * kBlockN, g.span.k_len);
      TileLoader<Traits, kBlockN>{static_cast<const T*>(p.v) + v_rows.offset, v_rows.row_stride}.load(
          sV(stage), g.n_begin * kBlockN, g.span.k_len);
    }
  };

  int k = next_round(0);
  if (k < 0) return;
  issue_prologue(k, 0);
  cp_async_commit();
  int stage_base = 0;  // the ring stage of this tile's first key tile
  while (k >= 0) {
    const Geometry g = Geometry::make(p, Schedule::tile(p, Schedule::position(p, k)));
    const int k_next = next_round(k + 1);
    const int head_kv = g.tile.head / p.gqa_ratio;
    const HeadRows k_rows = g.rows(p, p.k_strides, head_kv, g.span.k_offset);
    const HeadRows v_rows = g.rows(p, p.v_strides, head_kv, g.span.k_offset);
    const TileLoader<Traits, kBlockN> k_loader{static_cast<const T*>(p.k) + k_rows.offset, k_rows.row_stride};
    const TileLoader<Traits, kBlockN> v_loader{static_cast<const T*>(p.v) + v_rows.offset, v_rows.row_stride};
    const int warp_row0 = g.m0 + warp * Traits::kWarpRows;

    const bool has_sink = p.sinks != nullptr;
    const float sink_log2 = has_sink ? p.sinks[g.tile.head * p.sinks_stride] * kLog2e : 0.0f;
    const float m_init = has_sink ? sink_log2 : -INFINITY;
    OnlineSoftmax st[kM];
    float o[kM][Traits::kOTiles][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      st[m].m[0] = st[m].m[1] = m_init;
      st[m].l[0] = st[m].l[1] = 0.0f;
#pragma unroll
      for (int dt = 0; dt < Traits::kOTiles; ++dt) o[m][dt][0] = o[m][dt][1] = o[m][dt][2] = o[m][dt][3] = 0.0f;
    }

    // ---- mainloop over key tiles (kernel.hpp's, with the next tile's prologue in the last one)
    for (int n = g.n_begin; n < g.n_end; ++n) {
      const int stage = (stage_base + n - g.n_begin) & 1, ahead_stage = stage ^ 1;
      const bool load_ahead = n + 1 < g.n_end;
      const bool spread = Traits::kSpreadCopies && load_ahead && (n + 2) * kBlockN <= g.span.k_len;
      auto copy_share = [&](int ks) {
        if constexpr (Traits::kSpreadCopies) {
          constexpr int kPasses = TileLoader<Traits, kBlockN>::kPasses, kTotal = 2 * kPasses;
          constexpr int kSteps = Traits::kKSteps;
          if (!spread) return;
          const int row0 = (n + 1) * kBlockN;
#pragma unroll
          for (int j = ks * kTotal / kSteps; j < (ks + 1) * kTotal / kSteps; ++j) {
            if (j < kPasses)
              k_loader.load_pass(sK(ahead_stage), row0, j);
            else
              v_loader.load_pass(sV(ahead_stage), row0, j - kPasses);
          }
        }
      };
      cp_async_wait<0>();  // tile n (and Q) landed for this thread...
      __syncthreads();     // ...and for all; tile n-1's buffers are free again
      if (load_ahead && !spread) k_loader.load(sK(ahead_stage), (n + 1) * kBlockN, g.span.k_len);

      float s[kM][Traits::kSTiles][4];
      Mainloop::qk(s, nullptr, sQ_warp, sK(stage), copy_share);
      if (!load_ahead) {
        if (k_next >= 0) {
          __syncthreads();  // every warp's last Q K^T is done: Q and the free stage take the next tile
          issue_prologue(k_next, ahead_stage);
        }
      } else if (!spread) {
        v_loader.load(sV(ahead_stage), (n + 1) * kBlockN, g.span.k_len);
      }
      cp_async_commit();
      const bool capped = p.softcap_log2 > 0.0f;
      if (capped) Mainloop::apply_softcap(s, p);
      const int key0 = n * kBlockN;
      const bool interior = g.last.lo <= key0 && g.first.hi >= key0 + kBlockN;
      if (!interior)
        Mainloop::apply_mask(s, key0, warp_row0, g.span.q_len, g.span.k_len, p.window_left, p.window_right);
      typename Mainloop::VFrags v_frags;
      if constexpr (Traits::kRescaleThreshold > 0) Mainloop::pv_first_loads(v_frags, sV(stage));
      Mainloop::online_softmax(s, o, st, capped ? 1.0f : p.scale_log2);
      if constexpr (Traits::kRescaleThreshold == 0) Mainloop::pv_first_loads(v_frags, sV(stage));
      Mainloop::pv(o, s, sV(stage), v_frags);
    }
    const int n_tiles = g.n_end - g.n_begin;
    if (n_tiles == 0 && k_next >= 0) {
      cp_async_wait<0>();  // this tile's unread Q copies land before the next tile's overwrite them
      __syncthreads();
      issue_prologue(k_next, stage_base);
      cp_async_commit();
    }
    __syncthreads();  // every warp is done with the last stage's K and V: O is staged there

    // ---- epilogue
    const HeadRows o_rows = g.rows(p, p.out_strides, g.tile.head, g.span.q_offset);
    const std::int64_t lse_offset = p.layout == Layout::thd
                                        ? g.tile.head * p.lse_strides[0] + g.span.q_offset * p.lse_strides[1]
                                        : g.tile.batch * p.lse_strides[0] + g.tile.head * p.lse_strides[1];
    const std::int64_t lse_row_stride = p.layout == Layout::thd ? p.lse_strides[1] : p.lse_strides[2];
    const int staging_stage = (stage_base + n_tiles + 1) & 1;  // the last key tile's; the unused one without keys
    T* staging = reinterpret_cast<T*>(smem_raw + Traits::kQBytes + staging_stage * Traits::kStageBytes +
                                      warp * kWarpQBytes);
    Fa2Epilogue<Traits>::store(p, o, st, sink_log2, has_sink, staging, static_cast<T*>(p.out) + o_rows.offset,
                               o_rows.row_stride, warp_row0, g.span.q_len, lse_offset, lse_row_stride);
    stage_base = (stage_base + n_tiles) & 1;
    k = k_next;
  }
  cp_async_wait<0>();  // a last tile without keys may still have Q copies in flight
}

}  // namespace attnkit::cuda
