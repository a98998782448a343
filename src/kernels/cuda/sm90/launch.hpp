#pragma once
// Host launchers of fa3, one instantiation per generated .cu file: the TMA
// tensor maps of q, k and v are encoded here at each launch (a host call of a
// few microseconds; no allocation, so a CUDA graph can capture the launch).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/cuda_types.hpp"
#include "kernels/cuda/sm90/kernel.hpp"
#include "kernels/cuda/sm90/raster_tokens.hpp"

namespace attnkit::cuda::sm90 {

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no
// link against libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A tiled map of `kRank` dims (innermost first; byte strides of all but the
// first) over the traits' element type, in their swizzle, with unit element
// strides and 256-byte L2 promotion.
template <class Traits, int kRank>
cudaError_t encode_tiled(CUtensorMap& map, const void* data, const cuuint64_t (&dims)[kRank],
                         const cuuint64_t (&byte_strides)[kRank - 1], const cuuint32_t (&box)[kRank]) {
  auto encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  cuuint32_t elem_strides[kRank];
  for (int i = 0; i < kRank; ++i) elem_strides[i] = 1;
  const CUtensorMapDataType type =
      std::is_same_v<typename Traits::T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUtensorMapSwizzle swizzle =
      Traits::kSwizzle == Swizzle::b128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const CUresult r = encode(&map, type, kRank, const_cast<void*>(data), dims, byte_strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The strides of a BSHD / BHSD tensor along (row, head, batch).
struct RowStrides {
  std::int64_t row, head, batch;
};
inline RowStrides row_strides(const std::int64_t (&strides)[4], Layout layout) {
  return layout == Layout::bhsd ? RowStrides{strides[2], strides[1], strides[0]}
                                : RowStrides{strides[1], strides[2], strides[0]};
}

// A 4-D map (head dim, rows, heads, batch) of one q/k/v tensor whose boxes are
// one column block wide and `box_rows` rows tall, in the traits' swizzle.
// THD: (head dim, packed rows, heads, 1).
template <class Traits>
cudaError_t encode_rows_map(CUtensorMap& map, const void* data, const std::int64_t (&strides)[4], Layout layout,
                            std::int64_t rows, int heads, int batch, int dim, int box_rows) {
  constexpr std::int64_t e = sizeof(typename Traits::T);
  const RowStrides s = layout == Layout::thd ? RowStrides{strides[0], strides[1], strides[1] * heads}
                                             : row_strides(strides, layout);
  if (layout == Layout::thd) batch = 1;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  // A dimension of extent 1 may have any stride; TMA still wants a multiple of 16 bytes.
  auto bytes = [&](std::int64_t stride, cuuint64_t extent) {
    return static_cast<cuuint64_t>(extent > 1 ? stride * e : 16);
  };
  const cuuint64_t byte_strides[3] = {bytes(s.row, dims[1]), bytes(s.head, dims[2]), bytes(s.batch, dims[3])};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(Traits::kBlockCols), static_cast<cuuint32_t>(box_rows), 1, 1};
  return encode_tiled<Traits>(map, data, dims, byte_strides, box);
}

// Tensor `strides`' RasterFold (raster_tokens.hpp). False: batch > 1 and
// neither fold (BSHD with text tokens, or views with other batch strides).
inline bool raster_fold(const std::int64_t (&strides)[4], Layout layout, const VideoTiling& g, int heads, int batch,
                        RasterFold& fold) {
  fold = {};
  if (batch <= 1) return true;
  const RowStrides s = row_strides(strides, layout);
  if (s.batch == s.row * g.video_tokens()) fold.t_per_batch = g.frames;
  else if (s.batch == s.head * heads) fold.n_per_batch = heads;
  else return false;
  return true;
}

// A 5-D map (head dim, x, y, t, n) of one q/k/v tensor over the video tokens
// of `g` (raster_tokens.hpp), the batch folded as `fold` says; boxes one
// column block wide and one kernel tile of `box_rows` tile-ordered tokens.
template <class Traits>
cudaError_t encode_raster_map(CUtensorMap& map, const void* data, const std::int64_t (&strides)[4], Layout layout,
                              const VideoTiling& g, int heads, int batch, int dim, int box_rows,
                              const RasterFold& fold) {
  const RasterBox box_tokens = raster_box(g, box_rows);
  if (!box_tokens.ok() || layout == Layout::thd) return cudaErrorInvalidValue;
  constexpr std::int64_t e = sizeof(typename Traits::T);
  const RowStrides s = row_strides(strides, layout);
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(g.width),
                              static_cast<cuuint64_t>(g.height),
                              static_cast<cuuint64_t>(g.frames) * (fold.t_per_batch > 0 ? batch : 1),
                              static_cast<cuuint64_t>(heads) * (fold.n_per_batch > 0 ? batch : 1)};
  auto bytes = [&](std::int64_t stride, cuuint64_t extent) {
    return static_cast<cuuint64_t>(extent > 1 ? stride * e : 16);
  };
  const cuuint64_t byte_strides[4] = {bytes(s.row, dims[1]), bytes(s.row * g.width, dims[2]),
                                      bytes(s.row * g.width * g.height, dims[3]), bytes(s.head, dims[4])};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(Traits::kBlockCols), static_cast<cuuint32_t>(box_tokens.w),
                             static_cast<cuuint32_t>(box_tokens.h), static_cast<cuuint32_t>(box_tokens.t), 1};
  return encode_tiled<Traits>(map, data, dims, byte_strides, box);
}

// A 4-D map (head dim, slot, head, page) of a paged cache [pages, page_size,
// heads, dim], any strides: the BSHD map with pages for sequences and slots
// for rows; boxes one column block wide and `box_rows` slots tall.
template <class Traits>
cudaError_t encode_paged_map(CUtensorMap& map, const void* data, const std::int64_t (&strides)[4], int pages,
                             int page_size, int heads, int dim, int box_rows) {
  return encode_rows_map<Traits>(map, data, strides, Layout::bshd, page_size, heads, pages, dim, box_rows);
}

// Multiprocessors and L2 bytes of the current device (a persistent grid has
// one CTA per SM; the causal walk groups heads to fit L2), read once per device.
struct GridLimits {
  int sms = 0;
  long long l2_bytes = 0;
};
inline GridLimits grid_limits() {
  static std::atomic<int> sms[64];
  static std::atomic<long long> l2[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return {};
  int n = sms[device].load(std::memory_order_relaxed);
  if (n == 0) {
    int l2_bytes = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess)
      return {};
    l2[device].store(l2_bytes, std::memory_order_relaxed);
    sms[device].store(n, std::memory_order_relaxed);
  }
  return {n, l2[device].load(std::memory_order_relaxed)};
}

template <class Traits, bool kBlockSparse = false, bool kPaged = false, bool kRaster = false>
cudaError_t fa3_configure() {
  const auto kernel = fa3_forward_kernel<Traits, kBlockSparse, kPaged, kRaster>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Traits::kSmemBytes));
  // Two CTAs an SM need the whole carveout for shared memory: the driver may
  // otherwise size it for one.
  if (err == cudaSuccess && Traits::kCtasPerSm > 1)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  return err;
}

// Enqueues one forward on `stream`; allocates nothing (graph-capturable).
// kBlockSparse: a.block_offsets / block_indices list each query block's KV
// blocks; the plan checked block_q % kBlockM == 0 and block_k % kBlockN == 0.
// kRaster: q, k, v, out in raster order over a.raster (raster_tokens.hpp),
// each of q, k, v folding its batch as `folds` says.
struct RasterFolds {
  RasterFold q, k, v;
};
template <class Traits, bool kBlockSparse = false, bool kPaged = false, bool kRaster = false>
cudaError_t fa3_launch_once(const AttnParams& a_in, cudaStream_t stream, const RasterFolds& folds = {}) {
  AttnParams a = a_in;
  if constexpr (kBlockSparse)
    if (!prepare_listed_launch(a, Traits::kBlockM, Traits::kBlockN)) return cudaErrorInvalidValue;
  Fa3Params params{};
  params.a = a;
  cudaError_t err;
  if constexpr (kRaster) {
    if (a.layout == Layout::thd || raster_tokens_refusal(a.raster, a.seqlen_q, a.seqlen_k, Traits::kBlockM)[0] != 0 ||
        raster_tokens_refusal(a.raster, a.seqlen_q, a.seqlen_k, Traits::kBlockN)[0] != 0)
      return cudaErrorInvalidValue;
    params.raster_div = RasterDivisors(a.raster);
    params.fold_q = folds.q, params.fold_k = folds.k, params.fold_v = folds.v;
    if ((err = encode_raster_map<Traits>(params.raster_q, a.q, a.q_strides, a.layout, a.raster, a.heads_q, a.batch,
                                         a.head_dim_qk, Traits::kBlockM, folds.q)) != cudaSuccess ||
        (err = encode_raster_map<Traits>(params.raster_k, a.k, a.k_strides, a.layout, a.raster, a.heads_kv, a.batch,
                                         a.head_dim_qk, Traits::kBlockN, folds.k)) != cudaSuccess ||
        (err = encode_raster_map<Traits>(params.raster_v, a.v, a.v_strides, a.layout, a.raster, a.heads_kv, a.batch,
                                         a.head_dim_v, Traits::kBlockN, folds.v)) != cudaSuccess)
      return err;
  } else {
    (void)folds;
  }
  if ((err = encode_rows_map<Traits>(params.tma_q, a.q, a.q_strides, a.layout, a.rows_q, a.heads_q, a.batch,
                                     a.head_dim_qk, Traits::kBlockM)) != cudaSuccess)
    return err;
  if ((a.page_size > 0) != kPaged) return cudaErrorInvalidValue;  // the instance reads the cache it was built for
  if constexpr (kPaged) {
    // Whole pages per key tile, or whole key tiles per page (the plan checked it).
    if (!paged_tiles_fit(a.page_size, Traits::kBlockN)) return cudaErrorInvalidValue;
    const int pages = static_cast<int>(a.rows_k / a.page_size), box = std::min(a.page_size, Traits::kBlockN);
    if ((err = encode_paged_map<Traits>(params.tma_k, a.k, a.k_strides, pages, a.page_size, a.heads_kv,
                                        a.head_dim_qk, box)) != cudaSuccess ||
        (err = encode_paged_map<Traits>(params.tma_v, a.v, a.v_strides, pages, a.page_size, a.heads_kv,
                                        a.head_dim_v, box)) != cudaSuccess)
      return err;
  } else if ((err = encode_rows_map<Traits>(params.tma_k, a.k, a.k_strides, a.layout, a.rows_k, a.heads_kv, a.batch,
                                            a.head_dim_qk, Traits::kBlockN)) != cudaSuccess ||
             (err = encode_rows_map<Traits>(params.tma_v, a.v, a.v_strides, a.layout, a.rows_k, a.heads_kv, a.batch,
                                            a.head_dim_v, Traits::kBlockN)) != cudaSuccess) {
    return err;
  }
  // O through shared memory and TMA where the output allows a map (16-byte
  // aligned base and strides); packed sequences (THD) keep the threads'
  // stores, which never write past a sequence's rows.
  if constexpr (Traits::kStoreOTma && !kRaster)
    if (a.layout != Layout::thd && a.out_strides[3] == 1)
      params.store_o_tma = encode_rows_map<Traits>(params.tma_o, a.out, a.out_strides, a.layout, a.rows_q, a.heads_q,
                                                   a.batch, a.head_dim_v, 64) == cudaSuccess;
  // The kernel walks tiles blockIdx.x, blockIdx.x + gridDim.x, ...: a
  // persistent grid is one CTA per SM (two for 64-row tiles: kCtasPerSm),
  // otherwise one CTA per tile (as many as a 1-D grid holds; the walk covers
  // the rest). Uniform tiles (no causal or window mask) walk in order on the
  // persistent grid. Tiles of unequal length took one CTA each, which the
  // hardware hands out as SMs free up: a static walk left SMs idle (d128
  // causal s16k 449 TFLOP/s in order, 599 dealt by cost, 680 one CTA per tile;
  // d256 495 / 798), except for short sequences at head dims up to 128, where
  // the cost-ordered walk won (d128 causal s1k 376 vs 351, d64 253 vs 232;
  // docs/perf/gpu-fa3.md).
  // One CTA per tile pays each tile's Q load and epilogue unhidden; the
  // dynamic scheduler keeps the grid persistent and hands out tiles in cost
  // order as CTAs free up.
  const long long tiles = TileScheduler<Traits::kBlockM>::num_tiles(a);
  if (tiles <= 0) return cudaSuccess;
  const GridLimits limits = grid_limits();
  const bool uniform_tiles = a.window_left < 0 && a.window_right < 0;
  const bool short_unequal = TileScheduler<Traits::kBlockM>::num_m_blocks(a) <= 8 && Traits::kHeadDimQK <= 128;
  // Block-sparse lists are unequal in general, mask or not: a window cut at
  // the borders lists 18 to 75 key tiles per query tile (20 x 32 x 48
  // latents, 2 x 8 x 8 tiles, window (2, 1, 2)), and a static walk of its 5760
  // tiles over 132 CTAs gives the busiest CTA 1.27x the mean work, tiles
  // taken from a counter 1.02x (a model of those lists; STA's are equal).
  // Without a counter they keep the static walk in order.
  const bool unequal_tiles = !uniform_tiles || kBlockSparse;
  // Unequal tiles beyond short rows: a persistent grid that takes tiles from a
  // counter in the caller's workspace, when the plan gave one (tile numbers
  // travel as 32-bit words). Otherwise one CTA per tile.
  const long long resident = static_cast<long long>(limits.sms) * Traits::kCtasPerSm;  // CTAs the GPU holds at once
  const bool dynamic = Traits::kPersistent && limits.sms > 0 && unequal_tiles && !(short_unequal && !kBlockSparse) &&
                       a.tile_counter != nullptr && tiles > resident && tiles <= 0x7fffffffLL;
  const bool persistent =
      Traits::kPersistent && limits.sms > 0 && (uniform_tiles || (short_unequal && !kBlockSparse) || dynamic);
  long long ctas = persistent ? std::min<long long>(tiles, resident) : tiles;
  if (dynamic) {
    params.dynamic_tiles = 1;
    if ((err = cudaMemsetAsync(a.tile_counter, 0, sizeof(unsigned int), stream)) != cudaSuccess) return err;
  }
  if (persistent && !uniform_tiles && ctas < tiles) {
    const long long kv_bytes_per_slice =
        static_cast<long long>(a.seqlen_k) * (a.head_dim_qk + a.head_dim_v) * sizeof(typename Traits::T);
    params.cost_group = static_cast<int>(walk_group_heads(
        {dynamic, Traits::kHeadDimQK, Traits::kBlockM, TileScheduler<Traits::kBlockM>::num_m_blocks(a), ctas,
         kv_bytes_per_slice, limits.l2_bytes}));
    if (a.walk_group > 0) params.cost_group = a.walk_group;  // bench_fa2 --walk-groups
  }
  ctas = std::min<long long>(ctas, 0x7fffffffLL);
  params.walk = TileWalk::make<Traits::kBlockM>(a, ctas, params.cost_group, params.dynamic_tiles != 0);
  fa3_forward_kernel<Traits, kBlockSparse, kPaged, kRaster>
      <<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

// fa3_launch_once, except that a raster call in which some tensor cannot fold
// its batch (raster_fold) runs one launch per sequence on offset pointers
// (TMA maps hold at most 5 dims).
template <class Traits, bool kBlockSparse = false, bool kPaged = false, bool kRaster = false>
cudaError_t fa3_launch(const AttnParams& a, cudaStream_t stream) {
  if constexpr (kRaster) {
    RasterFolds folds;
    if (a.layout == Layout::thd) return cudaErrorInvalidValue;
    if (raster_fold(a.q_strides, a.layout, a.raster, a.heads_q, a.batch, folds.q) &&
        raster_fold(a.k_strides, a.layout, a.raster, a.heads_kv, a.batch, folds.k) &&
        raster_fold(a.v_strides, a.layout, a.raster, a.heads_kv, a.batch, folds.v))
      return fa3_launch_once<Traits, kBlockSparse, kPaged, kRaster>(a, stream, folds);
    using T = typename Traits::T;
    for (int b = 0; b < a.batch; ++b) {
      AttnParams one = a;
      one.batch = 1;
      one.q = static_cast<const T*>(a.q) + b * a.q_strides[0];
      one.k = static_cast<const T*>(a.k) + b * a.k_strides[0];
      one.v = static_cast<const T*>(a.v) + b * a.v_strides[0];
      one.out = static_cast<T*>(a.out) + b * a.out_strides[0];
      if (a.lse != nullptr) one.lse = a.lse + b * a.lse_strides[0];
      if constexpr (kBlockSparse)
        if (a.block_batch > 1) {  // this sequence's list rows (block_sparse_row's order)
          one.block_offsets = a.block_offsets + static_cast<std::int64_t>(b) * a.block_heads * a.num_q_blocks;
          one.block_batch = 1;
        }
      if (const cudaError_t err = fa3_launch_once<Traits, kBlockSparse, kPaged, kRaster>(one, stream);
          err != cudaSuccess)
        return err;
    }
    return cudaSuccess;
  }
  return fa3_launch_once<Traits, kBlockSparse, kPaged, kRaster>(a, stream);
}

}  // namespace attnkit::cuda::sm90

// Defines <FAMILY>_launch_<TAG>_<QK>_<V> and <FAMILY>_configure_<TAG>_<QK>_<V>
// (declared in src/backends/cuda/launchers.hpp) for one instances.def entry of
// an fa3 family: the tile shape from CONFIG, block-sparse lists when SPARSE, a paged
// cache when PAGED, raster-order video tokens when RASTER.
#define AK_FA3_LAUNCHER(FAMILY, CONFIG, SPARSE, PAGED, RASTER, TAG, QK, V)                                    \
  namespace attnkit::cuda {                                                                                    \
  using FAMILY##Traits_##TAG##_##QK##_##V = sm90::CONFIG<CudaElement<DType::TAG>::type, QK, V>::Traits;         \
  int FAMILY##_launch_##TAG##_##QK##_##V(const AttnParams& p, void* stream) {                                  \
    return static_cast<int>(sm90::fa3_launch<FAMILY##Traits_##TAG##_##QK##_##V, SPARSE, PAGED, RASTER>(        \
        p, static_cast<cudaStream_t>(stream)));                                                                \
  }                                                                                                            \
  int FAMILY##_configure_##TAG##_##QK##_##V() {                                                                \
    return static_cast<int>(sm90::fa3_configure<FAMILY##Traits_##TAG##_##QK##_##V, SPARSE, PAGED, RASTER>());     \
  }                                                                                                            \
  }

#define AK_DEFINE_LAUNCHER_fa3(TAG, QK, V) AK_FA3_LAUNCHER(fa3, Fa3Config, false, false, false, TAG, QK, V)
// fa3bs: block-sparse KV lists in 128-key blocks (Fa3Keys128Config: fa3's d128 tile, lazily rescaled).
#define AK_DEFINE_LAUNCHER_fa3bs(TAG, QK, V) AK_FA3_LAUNCHER(fa3bs, Fa3Keys128Config, true, false, false, TAG, QK, V)
// fa3bs192: block-sparse KV lists in blocks of 192-key multiples, on 192-key tiles (Fa3Keys192Config).
#define AK_DEFINE_LAUNCHER_fa3bs192(TAG, QK, V) \
  AK_FA3_LAUNCHER(fa3bs192, Fa3Keys192Config, true, false, false, TAG, QK, V)
// fa3bsk64: block-sparse KV lists in 64-key blocks, on 64-key tiles (Fa3Keys64Config).
#define AK_DEFINE_LAUNCHER_fa3bsk64(TAG, QK, V) AK_FA3_LAUNCHER(fa3bsk64, Fa3Keys64Config, true, false, false, TAG, QK, V)
// fa3bsq64: block-sparse KV lists in 64-query blocks, on 64 x 64 tiles two CTAs an SM (Fa3Q64Config).
#define AK_DEFINE_LAUNCHER_fa3bsq64(TAG, QK, V) AK_FA3_LAUNCHER(fa3bsq64, Fa3Q64Config, true, false, false, TAG, QK, V)
// fa3ss: request skip-softmax (AttnParams::skip_log2_factor / skip_counts).
#define AK_DEFINE_LAUNCHER_fa3ss(TAG, QK, V) AK_FA3_LAUNCHER(fa3ss, Fa3SkipConfig, false, false, false, TAG, QK, V)
// fa3pg: K and V from a paged cache (AttnParams::block_table).
#define AK_DEFINE_LAUNCHER_fa3pg(TAG, QK, V) AK_FA3_LAUNCHER(fa3pg, Fa3Config, false, true, false, TAG, QK, V)
// fa3bsr: fa3bs over video tokens in raster order (raster_tokens.hpp); fa3bsr192 on 192-key tiles.
#define AK_DEFINE_LAUNCHER_fa3bsr(TAG, QK, V) AK_FA3_LAUNCHER(fa3bsr, Fa3Keys128Config, true, false, true, TAG, QK, V)
#define AK_DEFINE_LAUNCHER_fa3bsr192(TAG, QK, V) \
  AK_FA3_LAUNCHER(fa3bsr192, Fa3Keys192Config, true, false, true, TAG, QK, V)
// fa3bsrq64: fa3bsq64 (64-query blocks on 64 x 64 tiles) over video tokens in raster order.
#define AK_DEFINE_LAUNCHER_fa3bsrq64(TAG, QK, V) \
  AK_FA3_LAUNCHER(fa3bsrq64, Fa3Q64Config, true, false, true, TAG, QK, V)
