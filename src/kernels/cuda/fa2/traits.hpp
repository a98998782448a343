#pragma once
// Fa2Traits: every tile constant of the sm_80 flash kernel in one place, with
// the impossible combinations rejected at compile time.
//
// One CTA owns kBlockM query rows of one (batch, head); each of its kWarps
// warps owns kMTiles strips of 16 rows (mma m16n8k16 has M = 16) for the whole
// key loop, so S = Q K^T of a tile and O stay in that warp's registers; every
// K / V fragment a warp loads from shared memory feeds kMTiles mmas. Keys
// stream through shared memory kBlockN at a time in a ring of kStages K+V
// buffers (tile n+kStages-1 loads while tile n computes), or, with kStages = 1,
// through one K and one V buffer in FlashAttention-2's order: V(n) loads during
// Q K^T(n), K(n+1) during softmax and P V(n) (two barriers per tile, a third
// less shared memory, so d256 fits two CTAs per SM).
#include <cstddef>

namespace attnkit::cuda {

template <class T_, int HeadDim, int MTiles, int BlockN, int Warps, int Stages, bool QInRegisters, int MinBlocks,
          int PrefetchDistance = 1, int RescaleThreshold = 0, bool Swizzle = false>
struct Fa2Traits {
  using T = T_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kMTiles = MTiles;                 // 16-row mma strips per warp
  static constexpr int kWarpRows = 16 * MTiles;
  static constexpr int kBlockM = kWarpRows * Warps;
  static constexpr int kMinBlocksPerSm = MinBlocks;  // __launch_bounds__ occupancy target
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kQInRegisters = QInRegisters;
  // Software pipelining of fragment loads: the ldmatrix for mma step i+D is
  // issued before the mmas of step i (a step: one x4 fragment, two n8 tiles per
  // row strip), so shared-memory latency overlaps D steps of math. 0: each
  // fragment loaded right before its mmas, ptxas schedules.
  static constexpr int kPrefetchDistance = PrefetchDistance;
  // Lazy rescaling (FlashAttention-4's trick), in log2 units: the running max
  // moves only when a tile's max exceeds it by more than this, so P = 2^(x-m)
  // stays <= 2^threshold and O is rescaled only on the (few, early) tiles where
  // it moves. 0: exact running max, O rescaled every tile.
  static constexpr int kRescaleThreshold = RescaleThreshold;
  // One K and one V buffer, each waited for where it is first read.
  static constexpr bool kSingleBuffered = Stages == 1;

  // The 8 row addresses of one ldmatrix fall in 8 different 16-byte bank
  // groups either way (no conflicts):
  //  - padded: rows 16 bytes longer than the data;
  //  - swizzled: unpadded rows, 16-byte chunk c of row r stored at chunk
  //    c ^ (r % 8). Rows then start on 128-byte lines, so each 8-lane phase of
  //    a cp.async (128 contiguous bytes of one row) fills one line: ncu at
  //    d256 counted 2.5x the ideal shared wavefronts and 1.5x the L2 sectors
  //    for the padded tiles' copies, and warps waiting on the copies' address
  //    registers (the ldmatrix side pays one XOR per fragment column:
  //    fa2/smem_layout.hpp).
  static constexpr bool kSwizzle = Swizzle;
  static constexpr int kPitch = Swizzle ? kHeadDim : kHeadDim + 8;  // elements
  static constexpr int kRowBytes = kPitch * static_cast<int>(sizeof(T));  // one tile row in shared memory
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks

  static constexpr int kKSteps = kHeadDim / 16;  // k-steps of S = Q K^T over the head dim
  static constexpr int kSTiles = kBlockN / 8;    // n8 tiles of S per warp
  static constexpr int kPvSteps = kBlockN / 16;  // k-steps of O += P V over the keys
  static constexpr int kOTiles = kHeadDim / 8;   // n8 tiles of O per warp

  static constexpr std::size_t kQBytes = std::size_t(kBlockM) * kRowBytes;
  static constexpr std::size_t kKvTileBytes = std::size_t(kBlockN) * kRowBytes;  // K or V
  static constexpr std::size_t kStageBytes = 2 * kKvTileBytes;
  static constexpr std::size_t kSmemBytes = kQBytes + kStages * kStageBytes;
  static constexpr std::size_t kSmemBytesPerCta() { return kSmemBytes + 1024; }  // + the runtime's reserve

  static_assert(sizeof(T) == 2, "fa2 runs 16-bit inputs (fp16 / bf16) on the tensor cores");
  static_assert(kHeadDim % 16 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "head dim: whole 16-wide mma k-steps, 32..256");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16, "kBlockN: whole 16-key mma k-steps");
  static_assert(kSTiles % 2 == 0 && kOTiles % 2 == 0, "ldmatrix.x4 loads n8 tiles in pairs");
  static_assert(Warps >= 1 && Warps <= 16, "1..16 warps per CTA");
  static_assert(MTiles >= 1 && MTiles <= 2, "1 or 2 row strips per warp (registers: O holds kMTiles*kHeadDim/2 floats)");
  static_assert(MTiles * (kHeadDim / 2 + kBlockN / 2) <= 200, "O + S accumulators would not fit in 255 registers");
  static_assert(PrefetchDistance >= 0 && PrefetchDistance <= 8, "fragment prefetch distance: 0..8 steps");
  static_assert(MinBlocks >= 1 && MinBlocks * kSmemBytesPerCta() <= 228 * 1024,
                "the occupancy target does not fit in the 228 KB of shared memory per SM");
  static_assert(!Swizzle || kChunksPerRow % 8 == 0, "the swizzle permutes whole 128-byte groups of a row");
  static_assert(!Swizzle || (kThreads % kChunksPerRow == 0 &&
                             ((kThreads / kChunksPerRow) % 8 == 0 || 8 % (kThreads / kChunksPerRow) == 0)),
                "swizzled tiles: each cp.async pass covers 1, 2, 4 or a multiple of 8 whole rows (d192: no)");
  static_assert(RescaleThreshold >= 0 && RescaleThreshold <= 10,
                "P = 2^(x - m) may reach 2^threshold: beyond 2^10 fp16 P loses range for the P V sums");
  static_assert(kStages >= 1 && kStages <= 4,
                "one K and one V buffer, or a ring of 2..4 K+V buffers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory exceeds the 227 KB a CTA can have on sm_80/sm_90");
  static_assert(kRowBytes % 16 == 0, "rows must stay 16-byte aligned for cp.async / ldmatrix");
};

// The tile shape chosen per head dim (the instance table picks dtype x dim).
// Registers per thread: O = kMTiles*kHeadDim/2 floats, S = kMTiles*kBlockN/2,
// Q (if kept) = kMTiles*kHeadDim/4.
//  - d64..d128: 4 warps x 32 rows, so every K/V fragment feeds two mmas, and
//    two CTAs per SM, whose independent barriers hide each other's load waits
//    (d96 at 64-key tiles is the fastest measured). d64 and d128 swizzled
//    (+4-7% and +3-6%).
//  - d256: FlashAttention-2's H200 shape, 4 warps x 16 rows, one K and one V
//    buffer, two CTAs per SM (O alone is 128 registers), swizzled: padded, the
//    same shape was up to 10% slower than 8 warps x 16 rows; swizzled (and
//    lazy) it is 6-24% faster (the copies' excess sectors and wavefronts
//    were its bottleneck).
//  - d192: 8 warps x 16 rows, one CTA per SM (not in the benchmark grid).
// Lazy rescaling at d128 and d256 (+2-6%); d64 slower (it spills there).
// Chosen with bench_fa2 --variants on an H200 (docs/perf/gpu-fa2.md).
//                         T  dim strips BlockN warps stages Q-in-regs CTAs/SM prefetch-distance
//                         lazy-rescale-threshold swizzle
template <class T, int HeadDim>
struct Fa2Config;
template <class T>
struct Fa2Config<T, 64> { using Traits = Fa2Traits<T, 64, 2, 128, 4, 2, false, 2, 0, 0, true>; };
template <class T>
struct Fa2Config<T, 96> { using Traits = Fa2Traits<T, 96, 2, 64, 4, 2, false, 2, 0>; };
template <class T>
struct Fa2Config<T, 128> { using Traits = Fa2Traits<T, 128, 2, 64, 4, 2, false, 2, 0, 8, true>; };
template <class T>
struct Fa2Config<T, 192> { using Traits = Fa2Traits<T, 192, 1, 64, 8, 2, false, 1, 1>; };
template <class T>
struct Fa2Config<T, 256> { using Traits = Fa2Traits<T, 256, 1, 64, 4, 1, false, 2, 1, 8, true>; };

// 64-query tiles for block-sparse lists in 64-query blocks (instances.def
// family fa2bsq64: sol_attn's 64 x 64 tiles, which the 128-row tiles above
// cannot take, one list per query tile): d128's shape with one 16-row strip
// per warp (4 warps x 16 rows), two CTAs per SM (80 KB of shared memory each).
template <class T, int HeadDim>
struct Fa2Q64Config;
template <class T>
struct Fa2Q64Config<T, 128> { using Traits = Fa2Traits<T, 128, 1, 64, 4, 2, false, 2, 0, 8, true>; };

}  // namespace attnkit::cuda
