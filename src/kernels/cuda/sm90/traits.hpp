#pragma once
// Fa3Traits: every tile constant of the sm_90 flash kernel in one place, with
// the impossible combinations rejected at compile time.
//
// One CTA owns kBlockM query rows of one (batch, head). Warpgroup 0 is the
// producer (one thread issues the TMA copies of Q once and of K and V tile by
// tile into a ring of kStages buffers); each of the kConsumers warpgroups
// behind it owns 64 rows (wgmma's M) for the whole key loop: S = Q K^T
// (64 x kBlockN, both operands in shared memory) and O += P V (64 x dv, P from
// registers) stay in its registers. Tiles are TMA-swizzled column blocks
// (smem_layout.hpp): 128-byte swizzle when the head dims are multiples of 64,
// 64-byte otherwise (d96), so that every wgmma N is whole atoms.
#include <cstddef>

#include "kernels/cuda/sm90/smem_layout.hpp"

namespace attnkit::cuda::sm90 {

template <class T_, int HeadDimQK, int HeadDimV, int BlockM, int BlockN, int Stages, int ProducerRegs = 24,
          int ConsumerRegs = 240, bool PingPong = true, bool Persistent = true, int RescaleThreshold = 0,
          bool SkipSoftmax = false, bool DeferRescale = false, int WaitAfterSoftmax = 0,
          bool StoreOTma = false>
struct Fa3Traits {
  using T = T_;  // __half or __nv_bfloat16
  static constexpr int kHeadDimQK = HeadDimQK, kHeadDimV = HeadDimV;
  static constexpr int kBlockM = BlockM, kBlockN = BlockN, kStages = Stages;
  static constexpr int kConsumers = BlockM / 64;       // consumer warpgroups
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // One consumer warpgroup has no partner to ping-pong with; two CTAs share
  // the SM instead, so that one's softmax runs beside the other's GEMMs and
  // each CTA's tile boundary (Q load, first S, epilogue) falls at its own
  // time. Each then holds half the SM's registers and shared memory.
  static constexpr int kCtasPerSm = kConsumers == 1 ? 2 : 1;
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kProducerRegs = ProducerRegs, kConsumerRegs = ConsumerRegs;
  // Ping-pong (FlashAttention-3's warpgroup scheduling): the consumer
  // warpgroups take turns issuing their wgmmas (named barriers), so one's
  // softmax runs while the next one's GEMMs hold the tensor cores.
  static constexpr bool kPingPong = PingPong && kConsumers >= 2;
  // Persistent: one CTA per SM walks the tiles (common/tile_scheduler.hpp),
  // the producer loading tile t+1's Q and first K/V while the consumers finish
  // tile t; otherwise one CTA per tile.
  static constexpr bool kPersistent = Persistent;
  // Lazy rescaling (common/online_softmax.hpp, TileSoftmax::step_lazy): the
  // running max moves only past this many log2 units, and O is rescaled only
  // on the tiles where some row of a warp moved. 0: exact max every tile.
  static constexpr int kRescaleThreshold = RescaleThreshold;
  // Request skip-softmax (docs/sparse.md section 3): a row adds nothing for a
  // key tile whose largest logit is below its running maximum over keys by
  // more than -log2(threshold), and a warpgroup none of whose rows keeps a
  // tile skips that tile's P V. The rule needs the exact running max.
  static constexpr bool kSkipSoftmax = SkipSoftmax;
  // O *= alpha(n-1) inside the turn that issues P V(n-1), while S(n) runs on the
  // tensor cores (FlashAttention-3's order), instead of after softmax(n-1)
  // between turns. Shipped where it measured faster (Fa3Config below).
  static constexpr bool kDeferRescale = DeferRescale;
  // Where the consumer waits for P V(n-1), which must finish before O is
  // rescaled and P(n) packed into P V's registers:
  //  0: where ptxas puts it, above every exponential of softmax(n);
  //  1: after softmax(n)'s row sums (primitives.hpp wgmma_wait_all_after),
  //     so that P V(n-1) and the softmax overlap; O's rescale and P's packing
  //     then run after the last exponential;
  //  2: after row g's exponentials, before row g + 8's, so that O's rescale
  //     and P's packing can interleave with row g + 8's exponentials (the
  //     placement of FlashAttention-3's SASS: its wait after 13 of 66
  //     exponentials). Not with skip-softmax, whose softmax is one piece.
  // What each Fa3Config shape ships, and what was measured: below.
  static constexpr int kWaitAfterSoftmax = WaitAfterSoftmax;
  // Hide the aligned shared-memory base from ptxas, so that it stays in a
  // register: in the ping-pong lazily rescaled instances (d128's dense and
  // list tiles) ptxas 13.0 otherwise recomputes it from SR_CgaCtaId in every
  // key tile (a 176-key tile's key loop: 81 -> 51 uniform instructions).
  // Elsewhere the register it holds costs more than it saves (d128's exact-max
  // 128 x 128 tile: 47 -> 57, d256 spills), so only there.
  static constexpr bool kPinSmemBase = RescaleThreshold > 0 && kPingPong;
  // The epilogue stages O in shared memory (stmatrix, in the TMA swizzle) and
  // one thread per warpgroup stores it with TMA (FlashAttention-3's epilogue),
  // where the call allows it (BSHD / BHSD, an output TMA can address:
  // Fa3Params::store_o_tma); otherwise, and always without this flag, each
  // thread stores its rows (epilogue.hpp). Shipped on d128's dense tile
  // (Fa3Config below), where its 32 KB buffer fits.
  static constexpr bool kStoreOTma = StoreOTma;
  // Named barrier ids (0 is __syncthreads): per consumer warpgroup, its
  // scheduling turn's, and (skip-softmax) its vote on whether to run P V.
  static constexpr int kTurnBarrier0 = 1;
  static constexpr int kVoteBarrier0 = kTurnBarrier0 + kConsumers;
  static constexpr int kEpilogueBarrier0 = kVoteBarrier0 + kConsumers;  // kStoreOTma: a warpgroup's O staging

  static constexpr Swizzle kSwizzle = (HeadDimQK % 64 == 0 && HeadDimV % 64 == 0) ? Swizzle::b128 : Swizzle::b64;
  static constexpr int kSwizzleBytes = swizzle_bytes(kSwizzle);
  static constexpr int kBlockCols = kSwizzleBytes / 2;  // elements per column block (one TMA box wide)
  static constexpr int kQkBlocks = HeadDimQK / kBlockCols, kVBlocks = HeadDimV / kBlockCols;

  static constexpr int kQkSteps = HeadDimQK / 16;  // wgmmas per S = Q K^T (K = 16 each)
  static constexpr int kPvSteps = BlockN / 16;     // wgmmas per O += P V
  static constexpr int kSTiles = BlockN / 8;       // 8-column tiles of S per thread
  static constexpr int kOTiles = HeadDimV / 8;     // 8-column tiles of O per thread

  static constexpr std::size_t kQBytes = std::size_t(kQkBlocks) * kBlockM * kSwizzleBytes;
  static constexpr std::size_t kKBytes = std::size_t(kQkBlocks) * kBlockN * kSwizzleBytes;
  static constexpr std::size_t kVBytes = std::size_t(kVBlocks) * kBlockN * kSwizzleBytes;
  static constexpr std::size_t kOBytes = StoreOTma ? std::size_t(kVBlocks) * kBlockM * kSwizzleBytes : 0;
  // Q | K[kStages] | V[kStages] | O (kStoreOTma) | barriers: q_full, q_empty, k_full, k_empty, v_full, v_empty |
  // the key tile in each stage (block-sparse: the producer's list entry, for the consumers) |
  // the dynamic scheduler's two output-tile slots: tile_full[2], tile_empty[2], tile_word[2] |
  // paged caches: page_fault[2], one per Q-buffer turn (mainloop.hpp).
  static constexpr int kTileSlots = 2;
  static constexpr std::size_t kBarrierOffset = kQBytes + kStages * (kKBytes + kVBytes) + kOBytes;
  static constexpr std::size_t kBarrierBytes = 8 * (2 + 5 * kStages + 3 * kTileSlots + 2);
  static constexpr std::size_t kAlign = 1024;  // swizzle atoms sit on 1024-byte boundaries
  static constexpr std::size_t kSmemBytes = kBarrierOffset + kBarrierBytes + kAlign;  // + the base's alignment slack

  static_assert(sizeof(T) == 2, "fa3 runs 16-bit inputs (fp16 / bf16) on the tensor cores");
  static_assert(HeadDimQK % kBlockCols == 0 && HeadDimV % kBlockCols == 0, "head dims: whole column blocks");
  static_assert(HeadDimQK % 16 == 0 && HeadDimQK >= 32 && HeadDimQK <= 256, "qk head dim: 16-wide k-steps, 32..256");
  static_assert(HeadDimV % 16 == 0 && HeadDimV >= 32 && HeadDimV <= 256, "v head dim: wgmma N, 32..256");
  static_assert(BlockM % 64 == 0 && kConsumers >= 1 && kConsumers <= 3, "64-row consumer warpgroups, 1..3");
  static_assert(BlockN % 16 == 0 && BlockN >= 16 && BlockN <= 256, "kBlockN: wgmma N (16..256) and 16-key P V steps");
  static_assert(BlockN % 8 == 0 && BlockM % 8 == 0, "whole 8-row swizzle atoms");
  static_assert(Stages >= 1 && Stages <= 4, "1..4 K/V buffers");
  static_assert(RescaleThreshold >= 0 && RescaleThreshold <= 10,
                "P = 2^(x - m) may reach 2^threshold: beyond 2^10 fp16 P loses range for the P V sums");
  static_assert(kEpilogueBarrier0 + kConsumers <= 16, "16 named barriers per CTA");
  static_assert(!StoreOTma || (kOTiles % 2 == 0 && kSwizzle == Swizzle::b128),
                "O staging: pairs of 8-column tiles per stmatrix, boxes on whole 1024-byte swizzle atoms");
  static_assert(!SkipSoftmax || RescaleThreshold == 0, "skip-softmax compares tiles with the exact running max");
  static_assert(!SkipSoftmax || !DeferRescale, "skip-softmax rescales where it decides a tile's P V");
  static_assert(WaitAfterSoftmax >= 0 && WaitAfterSoftmax <= 2, "kWaitAfterSoftmax: 0, 1 or 2");
  static_assert(WaitAfterSoftmax != 2 || !SkipSoftmax, "the wait between rows splits the dense softmax's rows");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory exceeds the 227 KB a CTA can have on sm_90");
  static_assert(kCtasPerSm == 1 || kSmemBytes <= 113 * 1024, "two CTAs an SM: at most 113 KB of shared memory each");
  static_assert(ProducerRegs % 8 == 0 && ConsumerRegs % 8 == 0 && ProducerRegs >= 24 && ConsumerRegs <= 256,
                "setmaxnreg takes multiples of 8 in 24..256");
  static_assert((ProducerRegs * 128 + ConsumerRegs * 128 * kConsumers) * kCtasPerSm <= 65536,
                "the register file holds 64K (shared by kCtasPerSm CTAs)");
  static_assert(kOTiles * 4 + kSTiles * 4 + kSTiles * 2 <= ConsumerRegs - 24,
                "O + S + P accumulators must fit the consumers' registers");
};

// The tile shape per (qk, v) head dims (docs/perf/gpu-fa3.md records what was
// measured):
//  - d64: three consumer warpgroups of 64 rows (+4-16% over two at s2k-16k
//    non-causal); the exact max, ptxas's wait placement, O from the
//    accumulators: the deferred rescale 0.99-1.03 (H200, 2026-12-06), the wait
//    after the softmax -1-5% (H100, 2026-12-05), between its rows 2-5% slower
//    at 7 of 8 points (H100, 2026-12-07), O by TMA flat.
//  - d128: 128 x 128 with ping-pong (+10% at s16k over no ping-pong), lazy
//    rescaling, the deferred rescale, the wait between softmax(n)'s rows and O
//    by TMA (Fa3LazyD128Traits). Against the exact-max tile with the wait after
//    both rows, stored from the accumulators (the tile shipped before), on an
//    H100 on 2026-12-07 (bench_fa2 --variants, one process): full s512 / 1k /
//    4k / 16k +2 / +4 / +6 / +6%, causal 0 / +2 / +5 / +6%. It also beat the
//    176-key tile (the fa3wide family, which dense unmasked calls over 1024+
//    keys ran on until then) with its old schedule by 3-5% (full) and 3-9%
//    (causal), and with this schedule at 7 of 8 points (s16k full within
//    0.1%), so that family is gone.
//  - d256: 128 x 80 without ping-pong (FlashAttention-3's choice; equal or
//    +2%), lazy rescaling (+4-7% at every measured point), the deferred rescale
//    (+0-5%, H200 2026-12-02), the wait between rows (+0.5-1% at 6 of 8 points
//    against the wait after both, H100 2026-12-07).
//                                       T  qk  v  BlockM BlockN stages
template <class T, int HeadDimQK, int HeadDimV>
struct Fa3Config;
// The lazily rescaled d128 schedule on BlockN-key tiles: the dense tile's
// (Fa3Config, with O by TMA) and the block-sparse list tiles' below.
template <class T, int BlockN, bool StoreOTma = false>
using Fa3LazyD128Traits = Fa3Traits<T, 128, 128, 128, BlockN, 2, 24, 240, /*PingPong=*/true, /*Persistent=*/true,
                                    /*Lazy=*/8, /*SkipSoftmax=*/false, /*DeferRescale=*/true,
                                    /*WaitAfterSoftmax=*/2, StoreOTma>;
template <class T>
struct Fa3Config<T, 64, 64> {
  using Traits = Fa3Traits<T, 64, 64, 192, 128, 2, 24, 160, /*PingPong=*/true, /*Persistent=*/true, /*Lazy=*/0,
                           /*SkipSoftmax=*/false, /*DeferRescale=*/false>;
};
template <class T>
struct Fa3Config<T, 96, 96> { using Traits = Fa3Traits<T, 96, 96, 128, 128, 2>; };
template <class T>
struct Fa3Config<T, 128, 128> { using Traits = Fa3LazyD128Traits<T, 128, /*StoreOTma=*/true>; };
template <class T>
struct Fa3Config<T, 192, 192> { using Traits = Fa3Traits<T, 192, 192, 128, 96, 2>; };
template <class T>
struct Fa3Config<T, 256, 256> {
  using Traits = Fa3Traits<T, 256, 256, 128, 80, 2, 24, 240, /*PingPong=*/false, /*Persistent=*/true, /*Lazy=*/8,
                           /*SkipSoftmax=*/false, /*DeferRescale=*/true, /*WaitAfterSoftmax=*/2>;
};
template <class T>
struct Fa3Config<T, 192, 128> { using Traits = Fa3Traits<T, 192, 128, 128, 112, 2>; };

// Block-sparse lists in 128-key blocks (instances.def families fa3bs, and
// fa3bsr on raster-order tokens): d128's dense schedule on its 128 x 128 tile,
// O stored from the accumulators (not yet timed with O by TMA on lists).
// Against the exact-max tile on random lists over 30720 tokens (H100, one
// machine, 2026-12-06, gpu-sparse.md): 3.5-8.6% less time at every density
// from 10% to 100%.
template <class T, int HeadDimQK, int HeadDimV>
struct Fa3Keys128Config;
template <class T>
struct Fa3Keys128Config<T, 128, 128> { using Traits = Fa3LazyD128Traits<T, 128>; };

// Block-sparse lists in 64-key blocks (sparge_attn's; instances.def family
// fa3bsk64), which the 128-key tiles above cannot take: d128's shape with
// 64-key tiles. Not tuned on a GPU yet (more stages for the shorter tiles
// are the first thing to try).
template <class T, int HeadDimQK, int HeadDimV>
struct Fa3Keys64Config;
template <class T>
struct Fa3Keys64Config<T, 128, 128> {
  using Traits = Fa3Traits<T, 128, 128, 128, 64, 2, 24, 240, /*PingPong=*/true, /*Persistent=*/true, /*Lazy=*/0,
                           /*SkipSoftmax=*/false, /*DeferRescale=*/false, /*WaitAfterSoftmax=*/true>;
};

// Block-sparse lists in 64-query blocks (sol_attn's kept tiles and
// video_sparse_attn_h3's cubes: 64 x 64 blocks; instances.def family
// fa3bsq64), which every 128-row tile above splits: one consumer warpgroup on
// a 64 x 64 tile, two CTAs an SM (kCtasPerSm: 80 KB of shared memory and 232
// consumer registers each), exact max, deferred rescale (the dense variant
// f3_d128_m64_n64_defer of bench/gpu/fa3_variants.def). Dense 64 x 64 tiles
// ran 0.82-0.92 of the 128 x 128 tile of the day (H100, 2026-12-07,
// gpu-fa3.md); these lists had only fa2's 64 x 64 tile before (VSA's fine
// pass at 30720 tokens: 4.16 ms on fa2's tile on an H200 on 2026-12-03, 2.30
// ms on this one on an H100 on 2026-12-07; gpu-sparse.md).
template <class T, int HeadDimQK, int HeadDimV>
struct Fa3Q64Config;
template <class T>
struct Fa3Q64Config<T, 128, 128> {
  using Traits = Fa3Traits<T, 128, 128, 64, 64, 2, 24, 232, /*PingPong=*/false, /*Persistent=*/true, /*Lazy=*/0,
                           /*SkipSoftmax=*/false, /*DeferRescale=*/true, /*WaitAfterSoftmax=*/0>;
};

// Block-sparse lists in blocks of 192-key multiples (instances.def families
// fa3bs192, and fa3bsr192 on raster-order tokens): STA's 6 x 8 x 8 tiles are
// 384-token blocks; the lazy d128 schedule on 192 keys (STA Wan 14.48 ms
// against 15.15 on 128-key tiles, H200 2026-12-04, both with the wait after
// both rows; not yet timed against each other with the wait between rows).
template <class T, int HeadDimQK, int HeadDimV>
struct Fa3Keys192Config;
template <class T>
struct Fa3Keys192Config<T, 128, 128> { using Traits = Fa3LazyD128Traits<T, 192>; };

// A paged cache is read in whole pages per key tile or whole key tiles per
// page (sm90/mainloop.hpp Fa3Producer::load_paged), in whole 8-row swizzle
// atoms: the page size divides the tile or is a multiple of it.
constexpr bool paged_tiles_fit(int page_size, int block_n) {
  return page_size > 0 && page_size % 8 == 0 && (block_n % page_size == 0 || page_size % block_n == 0);
}

// The skip-softmax instances (instances.def family fa3ss): the dense tile shape
// of the head dims with the exact running max and O rescaled in place (d128
// and d256 lose their lazy and deferred rescale), stored from the accumulators.
template <class Tr>
using Fa3SkipTraits = Fa3Traits<typename Tr::T, Tr::kHeadDimQK, Tr::kHeadDimV, Tr::kBlockM, Tr::kBlockN, Tr::kStages,
                                Tr::kProducerRegs, Tr::kConsumerRegs, Tr::kPingPong, Tr::kPersistent,
                                /*RescaleThreshold=*/0, /*SkipSoftmax=*/true, /*DeferRescale=*/false,
                                /*WaitAfterSoftmax=*/Tr::kWaitAfterSoftmax == 0 ? 0 : 1>;  // its softmax is one piece
template <class T, int HeadDimQK, int HeadDimV>
struct Fa3SkipConfig {
  using Traits = Fa3SkipTraits<typename Fa3Config<T, HeadDimQK, HeadDimV>::Traits>;
};
// d256: the skip state and the two loop versions spill at 80-key tiles (224
// bytes of stores) and at 64 (84 bytes); 48-key tiles leave them the registers.
template <class T>
struct Fa3SkipConfig<T, 256, 256> {
  using Traits = Fa3Traits<T, 256, 256, 128, 48, 2, 24, 240, /*PingPong=*/false, /*Persistent=*/true, 0, true>;
};

}  // namespace attnkit::cuda::sm90
