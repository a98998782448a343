#pragma once
// The fa3 mainloop, in its two roles, for one output tile at a time:
//  - Fa3Producer: one thread of warpgroup 0 copies the tile's Q, then K and V
//    key tile by key tile into a ring of kStages buffers with TMA. Each buffer
//    (Q too) has a "full" barrier (the copy's bytes landed) and an "empty" one
//    (every consumer warp is done reading it), so in a persistent CTA the next
//    tile's Q and first K/V load while the consumers finish this one.
//  - Fa3Consumer: a warpgroup's 64 query rows against the key tiles. Tile n's
//    S = Q K^T is issued before tile n-1's O += P V, so the softmax of tile n
//    (exponentials, row sums) runs while the tensor cores do P V(n-1)
//    (FlashAttention-3's intra-warpgroup overlap):
//        issue S(n) = Q K(n)^T;  issue O += P(n-1) V(n-1)
//        wait S(n) -> release K(n); softmax(S(n)) -> P(n) in fp32, alpha(n)
//        wait P V  -> release V(n-1); O *= alpha(n); P(n) -> 16-bit A fragments
#include <type_traits>

#include "kernels/cuda/common/key_tiles.hpp"
#include "kernels/cuda/common/online_softmax.hpp"
#include "kernels/cuda/sm90/params.hpp"
#include "kernels/cuda/sm90/primitives.hpp"

namespace attnkit::cuda::sm90 {

// Shared-memory addresses of one CTA's tiles and barriers (smem_layout.hpp).
template <class Traits>
struct Fa3Smem {
  std::uint32_t base;  // 1024-aligned shared-window address
  __device__ __forceinline__ std::uint32_t q() const { return base; }
  __device__ __forceinline__ std::uint32_t k(int stage) const {
    return base + static_cast<std::uint32_t>(Traits::kQBytes + stage * Traits::kKBytes);
  }
  __device__ __forceinline__ std::uint32_t v(int stage) const {
    return base + static_cast<std::uint32_t>(Traits::kQBytes + Traits::kStages * Traits::kKBytes + stage * Traits::kVBytes);
  }
  // kStoreOTma: O's staging tile, kBlockM rows in V's column blocks.
  __device__ __forceinline__ std::uint32_t o() const {
    return base + static_cast<std::uint32_t>(Traits::kQBytes + Traits::kStages * (Traits::kKBytes + Traits::kVBytes));
  }
  __device__ __forceinline__ std::uint32_t bar(int i) const {
    return base + static_cast<std::uint32_t>(Traits::kBarrierOffset + 8 * i);
  }
  __device__ __forceinline__ std::uint32_t q_full() const { return bar(0); }
  __device__ __forceinline__ std::uint32_t q_empty() const { return bar(1); }
  __device__ __forceinline__ std::uint32_t k_full(int s) const { return bar(2 + s); }
  __device__ __forceinline__ std::uint32_t k_empty(int s) const { return bar(2 + Traits::kStages + s); }
  __device__ __forceinline__ std::uint32_t v_full(int s) const { return bar(2 + 2 * Traits::kStages + s); }
  __device__ __forceinline__ std::uint32_t v_empty(int s) const { return bar(2 + 3 * Traits::kStages + s); }

  // Which key tile stage s holds (written before k_full's arrive, whose
  // release ordering makes it visible to the consumers that wait on k_full).
  __device__ __forceinline__ std::uint32_t stage_tile(int s) const { return bar(2 + 4 * Traits::kStages + s); }
  __device__ __forceinline__ void set_stage_tile(int s, int tile) const { st_shared_u32(stage_tile(s), tile); }
  // A word the producer rewrites once the consumers release it, read by lane
  // 0 alone and broadcast: lane 0 is the lane that arrives on the releasing
  // barrier (k_empty in Fa3Consumer::release, tile_empty below), and an arrive
  // releases only the arriving thread's own accesses, so the producer's next
  // write cannot race a read of another lane (compute-sanitizer racecheck flags that).
  static __device__ __forceinline__ int read_by_lane0(std::uint32_t word) {
    int v = 0;
    if ((threadIdx.x & 31) == 0) v = static_cast<int>(ld_shared_u32(word));
    return __shfl_sync(0xffffffffu, v, 0);
  }
  __device__ __forceinline__ int get_stage_tile(int s) const { return read_by_lane0(stage_tile(s)); }

  // The dynamic scheduler's output tiles (kernel.hpp): the producer writes the
  // j-th tile's number (-1: no more) into slot j % 2 once the consumers have
  // read the slot's previous one, then arrives on tile_full; each consumer
  // warp reads it with the lane that arrives on tile_empty (read_by_lane0).
  __device__ __forceinline__ std::uint32_t tile_full(int i) const { return bar(2 + 5 * Traits::kStages + i); }
  __device__ __forceinline__ std::uint32_t tile_empty(int i) const {
    return bar(2 + 5 * Traits::kStages + Traits::kTileSlots + i);
  }
  __device__ __forceinline__ std::uint32_t tile_word(int i) const {
    return bar(2 + 5 * Traits::kStages + 2 * Traits::kTileSlots + i);
  }
  __device__ __forceinline__ void publish_tile(int j, int tile) const {  // the producer's thread
    const int slot = j % Traits::kTileSlots;
    mbar_wait(tile_empty(slot), static_cast<std::uint32_t>(((j / Traits::kTileSlots) & 1) ^ 1));
    st_shared_u32(tile_word(slot), tile);
    mbar_arrive(tile_full(slot));
  }
  __device__ __forceinline__ int take_tile(int j) const {  // every consumer thread
    const int slot = j % Traits::kTileSlots;
    mbar_wait(tile_full(slot), static_cast<std::uint32_t>((j / Traits::kTileSlots) & 1));
    const int v = read_by_lane0(tile_word(slot));
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(tile_empty(slot));
    return v;
  }

  // Paged caches: whether the tile of Q turn i (PipelineState::q & 1) read a
  // block-table entry outside the cache. The producer clears the word once
  // q_empty says the consumers are done with the turn's previous tile, and
  // sets it before the arrive on v_full of the key tile that read the entry;
  // the consumers read it after their last v_full wait of the tile, with the
  // lane that arrives on q_empty (read_by_lane0), and write NaN rows.
  __device__ __forceinline__ std::uint32_t page_fault_word(int i) const {
    return bar(2 + 5 * Traits::kStages + 3 * Traits::kTileSlots + i);
  }
  __device__ __forceinline__ void set_page_fault(int i, int value) const { st_shared_u32(page_fault_word(i), value); }
  __device__ __forceinline__ bool page_fault(int i) const { return read_by_lane0(page_fault_word(i)) != 0; }

  __device__ __forceinline__ void init_barriers() const {
    mbar_init(q_full(), 1);
    mbar_init(q_empty(), Traits::kConsumerWarps);
    for (int i = 0; i < Traits::kTileSlots; ++i) {
      mbar_init(tile_full(i), 1);
      mbar_init(tile_empty(i), Traits::kConsumerWarps);
    }
    for (int s = 0; s < Traits::kStages; ++s) {
      mbar_init(k_full(s), 1);  // the producer's arrive_expect_tx, then the bytes
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), Traits::kConsumerWarps);  // one arrival per consumer warp
      mbar_init(v_empty(s), Traits::kConsumerWarps);
    }
    mbar_init_fence();
  }
};

// Ring position of the it-th key tile a CTA streams (counted over all its
// output tiles): its buffer and the parity of the buffer's phase (each buffer
// is filled once per kStages key tiles).
struct RingSlot {
  int stage;
  std::uint32_t parity;
};
template <int kStages>
__device__ __forceinline__ RingSlot ring_slot(int it) {
  return {it % kStages, static_cast<std::uint32_t>((it / kStages) & 1)};
}
// The slot after s: the ring position one key tile on.
template <int kStages>
__device__ __forceinline__ RingSlot next_slot(RingSlot s) {
  return s.stage + 1 == kStages ? RingSlot{0, s.parity ^ 1u} : RingSlot{s.stage + 1, s.parity};
}

// How far a role has come through the CTA's tiles: key tiles streamed and
// Q tiles loaded. Producer and consumers count the same tiles (only those
// with a visible key), so their ring positions agree.
struct PipelineState {
  int kv = 0;
  int q = 0;
  __device__ __forceinline__ std::uint32_t q_parity() const { return static_cast<std::uint32_t>(q & 1); }
};

// Where one CTA's rows live in the tensor maps: TMA coordinates of row 0 of
// the sequence, and the (batch, head) slice.
struct Fa3Coords {
  int q_row0, k_row0;  // THD: the sequence's packed offsets; else 0
  int head, head_kv;
  int batch;           // THD: 0 (the map has no batch extent)
};

// A paged cache's view of the tile's sequence (the producer's alone: the
// consumers have no registers to spare): its block-table row and its keys.
struct PagedSequence {
  int sequence;
  int k_len;
};

template <class Traits>
struct Fa3Producer {
  static __device__ __forceinline__ void load_rows(std::uint32_t dst, int rows, const CUtensorMap* map,
                                                   std::uint32_t bar, int row, int head, int batch, int blocks) {
    for (int c = 0; c < blocks; ++c)
      tma_load_4d(dst + static_cast<std::uint32_t>(c * rows * Traits::kSwizzleBytes), map, bar, c * Traits::kBlockCols,
                  row, head, batch);
  }

  // Tile-order rows [row, row + rows) of (batch, head): under kRaster (fa3bsr,
  // raster_tokens.hpp) video tokens are one box of the raster map, text
  // tokens rows of the row map; otherwise rows of the row map.
  template <bool kRaster>
  static __device__ __forceinline__ void load_block(std::uint32_t dst, int rows, const Fa3Params& p,
                                                    const CUtensorMap* row_map, const CUtensorMap* raster_map,
                                                    const RasterFold& fold, std::uint32_t bar, int row, int head,
                                                    int batch, int blocks) {
    if constexpr (kRaster) {
      const VideoTiling& g = p.a.raster;
      if (row < g.video_tokens()) {
        const VideoPosition at = p.raster_div.position(row);
        const int t = at.t + batch * fold.t_per_batch, n = head + batch * fold.n_per_batch;
        for (int c = 0; c < blocks; ++c)
          tma_load_5d(dst + static_cast<std::uint32_t>(c * rows * Traits::kSwizzleBytes), raster_map, bar,
                      c * Traits::kBlockCols, at.x, at.y, t, n);
        return;
      }
    }
    load_rows(dst, rows, row_map, bar, row, head, batch, blocks);
  }

  // Keys [key0, key0 + kBlockN) of a paged cache (maps (dim, slot, head,
  // page)): one box per page when pages are at most a tile, else the tile's
  // rows inside its page. Chunks past the sequence's keys load its last chunk
  // again (masked out, but finite: never uninitialised shared memory); page
  // numbers are read within the block table's row, and a page past the cache
  // is a TMA box out of bounds (zeros), so lying metadata reads nothing outside.
  // Returns whether an entry read lies outside the cache (the tile is then NaN).
  static __device__ __forceinline__ bool load_paged(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar,
                                                    const AttnParams& p, int head_kv, const PagedSequence& seq,
                                                    int key0, int blocks) {
    const int page_size = p.page_size;
    const int chunk = page_size < Traits::kBlockN ? page_size : Traits::kBlockN;
    const int last = seq.k_len > 0 ? (seq.k_len - 1) / chunk * chunk : 0;
    const std::int32_t* row = p.block_table + seq.sequence * p.block_table_strides[0];
    bool bad = false;
    for (int j = 0; j < Traits::kBlockN / chunk; ++j) {
      const int key = min(key0 + j * chunk, last);
      const int logical = min(key / page_size, p.block_table_cols - 1);
      const int page = logical >= 0 ? row[logical * p.block_table_strides[1]] : -1;
      bad |= page_outside(p, page);
      for (int c = 0; c < blocks; ++c)
        tma_load_4d(dst + static_cast<std::uint32_t>((c * Traits::kBlockN + j * chunk) * Traits::kSwizzleBytes), map,
                    bar, c * Traits::kBlockCols, key % page_size, head_kv, page);
    }
    return bad;
  }

  // The tile's Q at m0, then key tiles tiles.tile(0 .. count); one thread.
  // Tiles: KeyTiles (a dense range) or SparseKeyTiles (a block-sparse row).
  template <bool kPaged, bool kRaster, class Tiles>
  static __device__ __forceinline__ void load_tile(const Fa3Params& p, const Fa3Smem<Traits>& sm, const Fa3Coords& at,
                                                   const PagedSequence& seq, int m0, const Tiles& tiles,
                                                   PipelineState& ps) {
    if (tiles.count() <= 0) return;  // no key visible: the consumers write zeros without Q
    mbar_wait(sm.q_empty(), ps.q_parity() ^ 1);  // the previous tile's last Q K^T is done
    if constexpr (kPaged) sm.set_page_fault(ps.q & 1, 0);  // this turn's previous tile was stored
    mbar_arrive_expect_tx(sm.q_full(), static_cast<std::uint32_t>(Traits::kQBytes));
    load_block<kRaster>(sm.q(), Traits::kBlockM, p, &p.tma_q, &p.raster_q, p.fold_q, sm.q_full(), at.q_row0 + m0,
                        at.head, at.batch, Traits::kQkBlocks);
    constexpr bool kListed = !std::is_same_v<Tiles, KeyTiles>;
    int tile = tiles.tile(0);
    for (int it = 0; it < tiles.count(); ++it) {
      const RingSlot slot = ring_slot<Traits::kStages>(ps.kv + it);
      const int key0 = at.k_row0 + tile * Traits::kBlockN;
      // A listed tile comes from global memory: read the next one before waiting.
      const int next = it + 1 < tiles.count() ? tiles.tile(it + 1) : 0;
      mbar_wait(sm.k_empty(slot.stage), slot.parity ^ 1);
      if constexpr (kListed) sm.set_stage_tile(slot.stage, tile);
      mbar_arrive_expect_tx(sm.k_full(slot.stage), static_cast<std::uint32_t>(Traits::kKBytes));
      if constexpr (kPaged) {
        // K's entries are V's: flagged before V's arrive, seen by the consumers' epilogue.
        if (load_paged(sm.k(slot.stage), &p.tma_k, sm.k_full(slot.stage), p.a, at.head_kv, seq, key0,
                       Traits::kQkBlocks))
          sm.set_page_fault(ps.q & 1, 1);
      } else
        load_block<kRaster>(sm.k(slot.stage), Traits::kBlockN, p, &p.tma_k, &p.raster_k, p.fold_k,
                            sm.k_full(slot.stage), key0, at.head_kv, at.batch, Traits::kQkBlocks);
      mbar_wait(sm.v_empty(slot.stage), slot.parity ^ 1);
      mbar_arrive_expect_tx(sm.v_full(slot.stage), static_cast<std::uint32_t>(Traits::kVBytes));
      if constexpr (kPaged)
        (void)load_paged(sm.v(slot.stage), &p.tma_v, sm.v_full(slot.stage), p.a, at.head_kv, seq, key0,
                         Traits::kVBlocks);
      else
        load_block<kRaster>(sm.v(slot.stage), Traits::kBlockN, p, &p.tma_v, &p.raster_v, p.fold_v,
                            sm.v_full(slot.stage), key0, at.head_kv, at.batch, Traits::kVBlocks);
      tile = next;
    }
    ps.kv += tiles.count();
    ps.q += 1;
  }
};

template <class Traits>
struct Fa3Consumer {
  using T = typename Traits::T;
  static constexpr Swizzle kSw = Traits::kSwizzle;
  using SFrag = float[1][Traits::kSTiles][4];
  using OFrag = float[1][Traits::kOTiles][4];
  using PFrag = std::uint32_t[Traits::kPvSteps][4];
  using Softmax = TileSoftmax<1, Traits::kSTiles>;

  // The wgmma descriptors of this warpgroup's rows of Q (row wg_row0 of the
  // tile), built once per output tile: one per k-step, held in registers
  // across the key loop where there are at most 8 (ptxas keeps them in
  // uniform registers), else one stepped by an add per wgmma: d192's and
  // d256's 12 / 16, and skip-softmax's loop, left ptxas short of uniform
  // registers (R2UR moves in the key loop; d256 1% slower, gpu-fa3.md).
  // opaque(): without it ptxas rebuilt a masked descriptor per k-step from
  // known bits (two instructions).
  struct QDescs {
    static constexpr bool kHeld = Traits::kQkSteps <= 8 && !Traits::kSkipSoftmax;
    std::uint64_t d[kHeld ? Traits::kQkSteps : 1];
    __device__ __forceinline__ QDescs(std::uint32_t sQ, int wg_row0) {
#pragma unroll
      for (int ks = 0; ks < (kHeld ? Traits::kQkSteps : 1); ++ks)
        d[ks] = opaque(kmajor_desc(sQ, kSw, Traits::kBlockM, wg_row0, ks));
    }
    __device__ __forceinline__ std::uint64_t operator[](int ks) const {
      if constexpr (kHeld) return d[ks];
      else return desc_advance(d[0], kmajor_step_bytes(kSw, Traits::kBlockM, ks));
    }
  };

  // S = Q K^T for this warpgroup's 64 rows.
  static __device__ __forceinline__ void issue_qk(SFrag& s, const QDescs& q, std::uint64_t k0) {
#pragma unroll
    for (int ks = 0; ks < Traits::kQkSteps; ++ks)
      wgmma_ss<T, Traits::kBlockN>(s[0], q[ks],
                                   desc_advance(k0, kmajor_step_bytes(kSw, Traits::kBlockN, ks)), ks > 0);
  }

  // O += P V, P from registers.
  static __device__ __forceinline__ void issue_pv(OFrag& o, const PFrag& pf, std::uint64_t v0) {
#pragma unroll
    for (int kk = 0; kk < Traits::kPvSteps; ++kk)
      wgmma_rs<T, Traits::kHeadDimV>(o[0], pf[kk], desc_advance(v0, mnmajor_step_bytes(kSw, kk)), 1);
  }

  // P (fp32, the S accumulator) -> the A fragments of the P V wgmmas: keys
  // [16 kk, 16 kk + 16) are S's 8-column tiles 2 kk and 2 kk + 1 (the
  // m16n8k16 A layout, per warp).
  static __device__ __forceinline__ void to_a_fragments(PFrag& pf, const SFrag& s) {
#pragma unroll
    for (int kk = 0; kk < Traits::kPvSteps; ++kk) {
      pf[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
      pf[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
      pf[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      pf[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
  }

  // Ping-pong turns: warpgroup wg issues its wgmmas between take_turn() and
  // pass_turn(), then the next warpgroup (round robin) may issue its own. Each
  // turn barrier joins its owner (bar.sync) and the previous warpgroup
  // (bar.arrive): 256 threads. The last warpgroup hands the first its first turn.
  static __device__ __forceinline__ void first_turn(int wg) {  // once per CTA
    if constexpr (Traits::kPingPong)
      if (wg == Traits::kConsumers - 1) named_barrier_arrive(Traits::kTurnBarrier0, 256);
  }
  static __device__ __forceinline__ void take_turn(int wg) {
    if constexpr (Traits::kPingPong) named_barrier_sync(Traits::kTurnBarrier0 + wg, 256);
  }
  static __device__ __forceinline__ void pass_turn(int wg) {
    if constexpr (Traits::kPingPong)
      named_barrier_arrive(Traits::kTurnBarrier0 + (wg + 1) % Traits::kConsumers, 256);
  }

  // One arrival per warp on a buffer's "empty" barrier, once the whole warp
  // has waited for the wgmmas that read it.
  static __device__ __forceinline__ void release(std::uint32_t bar) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
  }

  // Scores of tile n before the softmax: softcap, mask unless interior.
  // Returns the factor c of the logits in log2 units (c * s).
  static __device__ __forceinline__ float scores(SFrag& s, const AttnParams& p, const KeyTiles& tiles, int n,
                                                 int strip_row0, const DeviceSpan& span) {
    const bool capped = p.softcap_log2 > 0.0f;
    if (capped) apply_softcap(s, p);
    const int key0 = n * Traits::kBlockN;
    if (!tiles.interior(key0, Traits::kBlockN))
      apply_mask(s, key0, strip_row0, span.q_len, span.k_len, p.window_left, p.window_right);
    return capped ? 1.0f : p.scale_log2;
  }

  // Scores of tile n -> P(n) and alpha(n): scores(), then the online softmax.
  // Returns whether O needs rescaling by alpha.
  static __device__ __forceinline__ bool softmax(SFrag& s, RowState (&st)[1], float (&alpha)[1][2],
                                                 const AttnParams& p, const KeyTiles& tiles, int n, int strip_row0,
                                                 const DeviceSpan& span) {
    const float c = scores(s, p, tiles, n, strip_row0, span);
    if constexpr (Traits::kRescaleThreshold > 0) {
      return Softmax::template step_lazy<Traits::kRescaleThreshold>(s, st, c, alpha);
    } else {
      Softmax::step(s, st, c, alpha);
      return true;
    }
  }

  // Skip-softmax's softmax() (common/online_softmax.hpp, TileSoftmaxSkip):
  // `kept` is whether this thread's rows keep tile n; returns whether some row
  // of the warp does (O then needs rescaling).
  static __device__ __forceinline__ bool softmax_skip(SFrag& s, RowState (&st)[1], float (&alpha)[1][2],
                                                      SkipRows& rows, const AttnParams& p, const KeyTiles& tiles,
                                                      int n, int strip_row0, const DeviceSpan& span, bool& kept) {
    const bool capped = p.softcap_log2 > 0.0f;
    if (capped) apply_softcap(s, p);
    const int key0 = n * Traits::kBlockN;
    if (!tiles.interior(key0, Traits::kBlockN))
      apply_mask(s, key0, strip_row0, span.q_len, span.k_len, p.window_left, p.window_right);
    kept = TileSoftmaxSkip<Traits::kSTiles>::step(s, st, rows, capped ? 1.0f : p.scale_log2, alpha,
                                                  (threadIdx.x & 3) == 0);
    return __any_sync(0xffffffffu, kept);
  }

  // The softmax of tile n (scores in s -> P). `keep`: whether this warpgroup
  // runs the tile's P V, which skip-softmax decides by a vote of its 128
  // threads (a named barrier that reduces a predicate); always true otherwise.
  static __device__ __forceinline__ bool softmax_tile(SFrag& s, RowState (&st)[1], float (&alpha)[1][2],
                                                      SkipRows& rows, const AttnParams& p, const KeyTiles& tiles,
                                                      int n, int wg, int strip_row0, const DeviceSpan& span,
                                                      bool& keep) {
    if constexpr (Traits::kSkipSoftmax) {
      bool mine = false;
      const bool rescale = softmax_skip(s, st, alpha, rows, p, tiles, n, strip_row0, span, mine);
      keep = named_barrier_any(Traits::kVoteBarrier0 + wg, 128, mine);
      return rescale;
    } else {
      (void)rows;
      keep = true;
      return softmax(s, st, alpha, p, tiles, n, strip_row0, span);
    }
  }

  // The key loop of one output tile for one warpgroup. `tiles` is what the
  // CTA visits (as in load_tile); `wg_tiles` this warpgroup's rows' dense
  // range (for the interior test); `rows` skip-softmax's row state (unused
  // otherwise). A tile the warpgroup does not keep skips its P V; its V is
  // still loaded and released.
  template <class Tiles>
  static __device__ __forceinline__ void run(const AttnParams& p, const Fa3Smem<Traits>& sm, OFrag& o,
                                             RowState (&st)[1], SkipRows& rows, const Tiles& tiles,
                                             const KeyTiles& wg_tiles, int wg, int strip_row0,
                                             const DeviceSpan& span, PipelineState& ps) {
    const int count = tiles.count();
    if (count <= 0) return;  // every consumer warpgroup of the CTA returns here: no turn is taken
    const int wg_row0 = 64 * wg;
    SFrag s;
    PFrag pf;
    float alpha[1][2];
    bool keep_pv = true;  // whether the previous tile's P V runs
    bool rescale_pending = false;  // kDeferRescale: O still owes alpha(n-1), applied before P V(n-1)
    // kDeferRescale: O *= alpha(n-1) inside the turn that issues P V(n-1) (no wgmma in flight reads O:
    // P V(n-2) was waited for); the caller's wgmma_fence() then orders O's registers before the wgmma.
    auto apply_pending_rescale = [&]() {
      if (rescale_pending) rescale_rows(o, alpha);
      fence_registers(o[0]);
    };
    // The wgmma descriptors: Q's for the tile, K's and V's of stage 0, stepped
    // to a stage by one add (stages are whole tiles apart).
    const QDescs q_desc(sm.q(), wg_row0);
    const std::uint64_t k_desc0 = opaque(kmajor_desc(sm.k(0), kSw, Traits::kBlockN, 0, 0));
    const std::uint64_t v_desc0 = opaque(mnmajor_desc(sm.v(0), kSw, Traits::kBlockN, 0));
    auto k_desc = [&](int stage) { return desc_advance(k_desc0, static_cast<std::uint32_t>(stage * Traits::kKBytes)); };
    auto v_desc = [&](int stage) { return desc_advance(v_desc0, static_cast<std::uint32_t>(stage * Traits::kVBytes)); };
    mbar_wait(sm.q_full(), ps.q_parity());

    // The key tile in a stage: a dense range's is known; a listed one is read
    // from the stage's slot once its K landed (before K's release lets the
    // producer reuse the slot).
    constexpr bool kListed = !std::is_same_v<Tiles, KeyTiles>;
    auto tile_in = [&](int stage, int it) {
      if constexpr (kListed) return sm.get_stage_tile(stage); else return tiles.tile(it);
    };
    // Tile 0: S, then its softmax; no P V yet.
    RingSlot prev_slot = ring_slot<Traits::kStages>(ps.kv);  // the slot of the key tile before `it`
    {
      const RingSlot slot = prev_slot;
      mbar_wait(sm.k_full(slot.stage), slot.parity);
      const int n = tile_in(slot.stage, 0);
      take_turn(wg);
      wgmma_fence();
      issue_qk(s, q_desc, k_desc(slot.stage));
      wgmma_commit();
      pass_turn(wg);
      wgmma_wait<0>();
      fence_registers(s[0]);
      release(sm.k_empty(slot.stage));
      if (count == 1) release(sm.q_empty());  // the tile's last Q K^T is done
      softmax_tile(s, st, alpha, rows, p, wg_tiles, n, wg, strip_row0, span, keep_pv);
      to_a_fragments(pf, s);  // O is zero: alpha needs no rescale
    }
    // One key tile: S(n) issued, then P V(n-1) when the warpgroup kept tile
    // n-1. The two versions are whole straight-line paths that meet again
    // only once no wgmma is in flight: a wgmma under a branch that rejoins
    // while it runs makes ptxas fence the accumulators (C7519): fa3ss d128
    // took 28.6 ms that way against 25.5 split (dense 22; docs/perf/gpu-sparse.md).
    auto key_tile = [&](int it, auto with_pv) {
      constexpr bool kPv = decltype(with_pv)::value;
      const RingSlot prev = prev_slot, slot = next_slot<Traits::kStages>(prev);
      prev_slot = slot;
      mbar_wait(sm.k_full(slot.stage), slot.parity);
      const int n = tile_in(slot.stage, it);
      mbar_wait(sm.v_full(prev.stage), prev.parity);
      fence_registers(pf);
      fence_registers(o[0]);
      take_turn(wg);
      wgmma_fence();
      issue_qk(s, q_desc, k_desc(slot.stage));
      wgmma_commit();
      if constexpr (Traits::kDeferRescale) {
        apply_pending_rescale();  // while S(n) runs
        wgmma_fence();            // O's registers were written after the turn's first fence
      }
      if constexpr (kPv) issue_pv(o, pf, v_desc(prev.stage));
      wgmma_commit();  // possibly empty: the wait counts below stay the same
      pass_turn(wg);
      wgmma_wait<1>();  // S(n) done; P V(n-1) may still run
      fence_registers(s[0]);
      release(sm.k_empty(slot.stage));
      if (it == count - 1) release(sm.q_empty());
      if constexpr (Traits::kWaitAfterSoftmax == 2) {
        // Both rows' max and alpha, row g's exponentials, the wait, then O's rescale
        // (unless deferred into the next turn) beside row g + 8's exponentials (their
        // multiplies fill the exponential unit's gaps), and P(n)'s packing.
        const float c = scores(s, p, wg_tiles, n, strip_row0, span);
        bool rescale = true;  // exact: every tile; lazy: when some row of the warp moved
        if constexpr (Traits::kRescaleThreshold > 0) {
          rescale = __any_sync(0xffffffffu, Softmax::template move_max_lazy<Traits::kRescaleThreshold>(s, st, c, alpha));
        } else {
#pragma unroll
          for (int r = 0; r < 2; ++r) Softmax::move_max(s, st, c, alpha, 0, r);
        }
        Softmax::exponentiate_at_max(s, st, c, alpha, 0, 0);
        wgmma_wait_all_after(st[0].l[0]);  // P V(n-1) done: O and P(n-1)'s registers are free
        fence_registers(o[0]);
        release(sm.v_empty(prev.stage));
        if constexpr (Traits::kDeferRescale) rescale_pending = rescale;
        else if (rescale) rescale_rows(o, alpha);
        Softmax::exponentiate_at_max(s, st, c, alpha, 0, 1);
        to_a_fragments(pf, s);
      } else {
        const bool rescale = softmax_tile(s, st, alpha, rows, p, wg_tiles, n, wg, strip_row0, span, keep_pv);
        // P V(n-1) done: O and P(n-1)'s registers are free
        if constexpr (Traits::kWaitAfterSoftmax == 1) wgmma_wait_all_after(st[0].l[0] + st[0].l[1]);
        else wgmma_wait<0>();
        fence_registers(o[0]);
        release(sm.v_empty(prev.stage));
        if constexpr (Traits::kDeferRescale) rescale_pending = rescale;
        else if (rescale) rescale_rows(o, alpha);
        to_a_fragments(pf, s);
      }
    };
    for (int it = 1; it < count; ++it) {
      if constexpr (Traits::kSkipSoftmax) {
        if (keep_pv) key_tile(it, std::true_type{}); else key_tile(it, std::false_type{});
      } else {
        key_tile(it, std::true_type{});
      }
    }
    // The last tile's P V (skipped, with its turn still taken, when not kept).
    const RingSlot last = prev_slot;
    mbar_wait(sm.v_full(last.stage), last.parity);
    fence_registers(pf);
    fence_registers(o[0]);
    take_turn(wg);
    if (!Traits::kSkipSoftmax || keep_pv) {
      if constexpr (Traits::kDeferRescale) apply_pending_rescale();
      wgmma_fence();
      issue_pv(o, pf, v_desc(last.stage));
      wgmma_commit();
      pass_turn(wg);
      wgmma_wait<0>();
    } else {
      pass_turn(wg);
    }
    fence_registers(o[0]);
    release(sm.v_empty(last.stage));
    ps.kv += count;
    ps.q += 1;
  }
};

}  // namespace attnkit::cuda::sm90
