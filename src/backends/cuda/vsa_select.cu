// video_sparse_attn_h3's selection and combine kernels (vsa_select.hpp). The
// means, scores and ranking are sparse/video_sparse_rule.hpp's, which the
// host runs too, over the tokens, dims and cubes in the host's order
// (sparse/video_sparse.cpp pool_cubes, video_sparse_backend.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/sparse/video_sparse_rule.hpp"
#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/vsa_select.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPoolThreads = 128;
constexpr int kCubeTokens = 64;  // 4 x 4 x 4 (VideoSparseSettings::kCube)
// The coarse pass: one warp per query cube, kRowsPerCta query cubes of one
// (sequence, head) per CTA sharing each staged chunk of kChunk key-cube means.
constexpr int kRowsPerCta = kThreads / 32;
constexpr int kChunk = 32;
constexpr int kMaxCoarseDim = 256;  // the coarse pass's staged rows: 48.1 KB of shared memory at d 256

// One CTA per cube of one (sequence, head) slice of q, k or v (q's first,
// then k's, then v's): each thread a dim, summing the cube's tokens in tile
// order. The tokens' rows are found once per cube (raster_index's 64-bit
// divisions per element were most of this kernel's 3.0 ms at 20 x 32 x 48
// latents, 24 heads, H200, 2026-12-02), and the loop is unrolled so that
// eight loads are in flight; the sums keep their order.
template <class T>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(VsaSelect s, std::int64_t q_cubes, std::int64_t kv_cubes) {
  __shared__ std::int64_t token_row[kCubeTokens];
  const int nc = s.cubes.tiles(), n = s.cubes.tile_tokens();
  for (std::int64_t u = blockIdx.x; u < q_cubes + 2 * kv_cubes; u += gridDim.x) {
    const int which = u < q_cubes ? 0 : u < q_cubes + kv_cubes ? 1 : 2;  // q, k, v
    const std::int64_t local = which == 0 ? u : which == 1 ? u - q_cubes : u - q_cubes - kv_cubes;
    const int heads = which == 0 ? s.heads_q : s.heads_kv;
    const int c = static_cast<int>(local % nc), h = static_cast<int>(local / nc % heads),
              b = static_cast<int>(local / nc / heads);
    const T* x = static_cast<const T*>(which == 0 ? s.q : which == 1 ? s.k : s.v);
    const std::int64_t* st = which == 0 ? s.q_strides : which == 1 ? s.k_strides : s.v_strides;
    const int d = which == 2 ? s.head_dim_v : s.head_dim;
    float* mean = (which == 0 ? s.q_mean : which == 1 ? s.k_mean : s.v_mean) + local * d;
    __syncthreads();  // the previous cube's reads of token_row are done
    for (int t = threadIdx.x; t < n; t += blockDim.x)
      token_row[t] = raster_index(s.cubes, static_cast<std::int64_t>(c) * n + t) * st[1];
    __syncthreads();
    const T* slice = x + b * st[0] + h * st[2];
    for (int e = threadIdx.x; e < d; e += blockDim.x) {
      double sum = 0.0;
#pragma unroll 8
      for (int t = 0; t < n; ++t) sum = unfused_add(sum, static_cast<double>(to_float(slice[token_row[t] + e])));
      mean[e] = sparse::vsa_cube_mean(sum, n);
    }
  }
}

// The coarse pass's scores: a lane's key cube c0 + lane of each 32-cube chunk,
// chunks below kRegChunks in registers, the rest (nc > 512) in `scores`.
constexpr int kRegChunks = 16;
// The coarse output: each lane up to kDimsPerLane dims of a kVDims-wide block per pass over the cubes.
constexpr int kDimsPerLane = 4;
constexpr int kVDims = 32 * kDimsPerLane;
static_assert(kChunk == 32, "a chunk's key cubes are a warp's lanes");

// The coarse pass's dynamic shared memory: q means [kRowsPerCta][d] as double,
// then the larger of key-cube means [kChunk][d + 1] and v means [kChunk][min(dv, kVDims)] as float.
std::size_t coarse_smem_bytes(int head_dim, int head_dim_v) {
  return sizeof(double) * kRowsPerCta * head_dim +
         sizeof(float) * kChunk * std::max(head_dim + 1, std::min(head_dim_v, kVDims));
}

// The coarse pass of kRowsPerCta query cubes a of one (sequence, head), warp
// w taking query cube a0 + w:
//   1. C[a, c] for every key cube c (each lane one key cube of the staged
//      chunk, its dims in order), kept in the lane's registers;
//   2. the kept flags: cube c is kept when fewer than `keep` cubes rank before
//      it. The keep-th largest key T is found bit by bit (the largest T with
//      at least `keep` keys >= T) over the lanes' register keys; keys above T
//      are kept, and of the keys equal to T the lowest cubes, as many as are
//      still missing;
//   3. the softmax weights and the coarse output softmax(C) . v_mean: chunks
//      of v_mean staged once for the CTA's warps, each weight shuffled from
//      its lane, each lane some dims summing the cubes in order.
// Before (scores in global memory, the 64 passes and the output re-reading
// them there, v_mean read by every warp, q and k means widened per product):
// 1.34 ms at 20 x 32 x 48 latents, 24 heads, d128, bf16, H100, 2026-12-07;
// 0.85 ms with the above. Staging k and v means as double too (widened once
// a CTA, not once a product) ran 0.86 ms (H100, 2026-12-08): the conversions
// are not what limits this pass, so they stay float.
__global__ void __launch_bounds__(kThreads) coarse_kernel(VsaSelect s, std::int64_t groups) {
  // q means [kRowsPerCta][d] as double, then either key-cube means [kChunk][d + 1]
  // or v means [kChunk][min(dv, kVDims)] as float (coarse_smem_bytes).
  extern __shared__ double smem[];
  const int nc = s.cubes.tiles(), d = s.head_dim, dv = s.head_dim_v, group = s.heads_q / s.heads_kv;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int per_slice = (nc + kRowsPerCta - 1) / kRowsPerCta;
  double* q_s = smem;
  float* stage = reinterpret_cast<float*>(smem + kRowsPerCta * d);
  for (std::int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const std::int64_t slice = g / per_slice;  // b * heads_q + h
    const int a0 = static_cast<int>(g % per_slice) * kRowsPerCta;
    const int h = static_cast<int>(slice % s.heads_q), b = static_cast<int>(slice / s.heads_q);
    const std::int64_t kv0 = (static_cast<std::int64_t>(b) * s.heads_kv + h / group) * nc;
    const int a = a0 + warp;
    const bool active = a < nc;  // inactive warps still meet every barrier
    const std::int64_t r = slice * nc + a;  // this warp's CSR row
    double* spill = s.scores + r * nc;       // this lane's scores of cubes from 32 x kRegChunks on
    __syncthreads();  // the previous group is done with q_s and stage
    for (int x = threadIdx.x; x < kRowsPerCta * d; x += blockDim.x) {
      const int row = a0 + x / d;
      q_s[x] = row < nc ? static_cast<double>(s.q_mean[(slice * nc + row) * d + x % d]) : 0.0;
    }
    // A lane's score (then weight) of key cube j * kChunk + lane: score[j] below
    // kRegChunks (the selects keep it in registers; the chunk loops stay loops), else spill.
    double score[kRegChunks] = {};
    auto score_at = [&](int j) {
      double v = 0.0;
#pragma unroll
      for (int i = 0; i < kRegChunks; ++i) v = i == j ? score[i] : v;
      return j < kRegChunks ? v : spill[j * kChunk + lane];
    };
    auto set_score = [&](int j, double v) {
#pragma unroll
      for (int i = 0; i < kRegChunks; ++i) score[i] = i == j ? v : score[i];
      if (j >= kRegChunks) spill[j * kChunk + lane] = v;
    };
    // 1. The scores, a staged chunk of key cubes at a time.
    for (int j = 0; j * kChunk < nc; ++j) {
      const int c0 = j * kChunk, chunk = min(kChunk, nc - c0);
      __syncthreads();  // q_s is written; the previous chunk's scores are done
      for (int l = warp; l < chunk; l += kRowsPerCta)  // a warp a key cube's row, no divisions
        for (int e = lane; e < d; e += 32) stage[l * (d + 1) + e] = s.k_mean[(kv0 + c0 + l) * d + e];
      __syncthreads();
      if (active && lane < chunk) set_score(j, sparse::vsa_cube_score(q_s + warp * d, stage + lane * (d + 1), d, s.scale));
    }
    // 2. Keys past the cubes are 0, below every candidate (each has a bit set).
    std::uint64_t key[kRegChunks];
#pragma unroll
    for (int j = 0; j < kRegChunks; ++j) key[j] = j * kChunk + lane < nc ? sparse::vsa_score_key(score[j]) : 0;
    // How many of the row's keys are at least `bound` (every lane gets it).
    auto count_at_least = [&](std::uint64_t bound) {
      int count = 0;
#pragma unroll
      for (int j = 0; j < kRegChunks; ++j) count += key[j] >= bound ? 1 : 0;
      for (int c = kRegChunks * kChunk + lane; c < nc; c += kChunk) count += sparse::vsa_score_key(spill[c]) >= bound ? 1 : 0;
      return static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(count)));
    };
    double total = 0.0;
    if (active) {
      std::uint64_t cut = 0;
      for (int bit = 63; bit >= 0; --bit) {
        const std::uint64_t candidate = cut | (std::uint64_t{1} << bit);
        if (count_at_least(candidate) >= s.keep) cut = candidate;
      }
      // Keys above the cut are kept; of those equal to it, the lowest cubes up to `keep`.
      const int above = cut == ~std::uint64_t{0} ? 0 : count_at_least(cut + 1);
      int ties_seen = 0, kept = 0;  // keys equal to the cut in the chunks before this one
      double top = -INFINITY;
      std::uint8_t* flag = s.flags + r * nc;
      for (int j = 0; j * kChunk < nc; ++j) {
        const int c = j * kChunk + lane;
        const double sc = c < nc ? score_at(j) : 0.0;
        const std::uint64_t k = c < nc ? sparse::vsa_score_key(sc) : 0;
        const unsigned tie = __ballot_sync(0xffffffffu, c < nc && k == cut);
        const int ties_before = ties_seen + __popc(tie & ((1u << lane) - 1u));
        const bool keep_c = c < nc && sparse::vsa_kept_by_cut(k, cut, ties_before, s.keep, above);
        if (c < nc) {
          flag[c] = keep_c ? 1 : 0;
          top = fmax(top, sc);
        }
        kept += __popc(__ballot_sync(0xffffffffu, keep_c));
        ties_seen += __popc(tie);
      }
      for (int o = 16; o > 0; o >>= 1) top = fmax(top, __shfl_xor_sync(0xffffffffu, top, o));
      // 3. The weights in place of the scores, each lane's summed over its cubes in order.
      for (int j = 0; j * kChunk + lane < nc; ++j) {
        const double w = exp(score_at(j) - top);
        total += w;
        set_score(j, w);
      }
      for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
      if (lane == 0) s.counts[r] = kept;
    }
    for (int e0 = 0; e0 < dv; e0 += kVDims) {
      const int width = min(kVDims, dv - e0);
      double acc[kDimsPerLane] = {};
      // acc[i] += w[c] * v_mean[c][e0 + lane + 32 i] over the cubes c in order, a staged chunk at a time.
      for (int j = 0; j * kChunk < nc; ++j) {
        const int c0 = j * kChunk, chunk = min(kChunk, nc - c0);
        __syncthreads();  // the previous chunk's (or the scores') reads of stage are done
        for (int l = warp; l < chunk; l += kRowsPerCta)
          for (int e = lane; e < width; e += 32) stage[l * width + e] = s.v_mean[(kv0 + c0 + l) * dv + e0 + e];
        __syncthreads();
        if (!active) continue;
        const double weight = lane < chunk ? score_at(j) : 0.0;
        for (int l = 0; l < chunk; ++l) {
          const double w = __shfl_sync(0xffffffffu, weight, l);
#pragma unroll
          for (int i = 0; i < kDimsPerLane; ++i)
            if (lane + 32 * i < width) acc[i] += w * static_cast<double>(stage[l * width + lane + 32 * i]);
        }
      }
      if (active) {
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i)
          if (lane + 32 * i < width) s.coarse[r * dv + e0 + lane + 32 * i] = static_cast<float>(acc[i] / total);
      }
    }
  }
}

// Memory-bound: each thread kVec consecutive elements of one (token, head)
// row of fine (contiguous), their cube and gate found once, with 16-byte loads
// (and stores where out allows) when the rows are whole vectors, else kVec 1.
// Before (one CTA per token, one element a thread, scalar loads and stores):
// 0.48 ms at 30720 tokens, 24 heads, d128, bf16, H100, 2026-12-07.
template <class T, int kVec, bool kVecOut>
__global__ void __launch_bounds__(kThreads) combine_kernel(VsaCombine c) {
  const int per_row = c.head_dim_v / kVec, n = c.cubes.tile_tokens(), nc = c.cubes.tiles();
  const std::int64_t work = static_cast<std::int64_t>(c.batch) * c.seqlen * c.heads_q * per_row;
  const T* fine = static_cast<const T*>(c.fine);
  T* out = static_cast<T*>(c.out);
  for (std::int64_t u = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; u < work;
       u += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = u / per_row;  // (b * seqlen + i) * heads_q + h
    const int e0 = static_cast<int>(u % per_row) * kVec;
    const int h = static_cast<int>(row % c.heads_q);
    const std::int64_t bi = row / c.heads_q, i = bi % c.seqlen;
    const int b = static_cast<int>(bi / c.seqlen);
    const std::int64_t cube = tile_order_index(c.cubes, i) / n;
    const std::int64_t from = ((static_cast<std::int64_t>(b) * c.heads_q + h) * nc + cube) * c.head_dim_v + e0;
    const double g = c.gate[gate_offset(c.layout, c.gate_strides, b, h, i, 0)];
    alignas(16) T f[kVec];
    alignas(16) float coarse[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(f) = *reinterpret_cast<const uint4*>(fine + row * c.head_dim_v + e0);
      *reinterpret_cast<float4*>(coarse) = *reinterpret_cast<const float4*>(c.coarse + from);
      *reinterpret_cast<float4*>(coarse + 4) = *reinterpret_cast<const float4*>(c.coarse + from + 4);
    } else {
      f[0] = fine[row * c.head_dim_v + e0];
      coarse[0] = c.coarse[from];
    }
    alignas(16) T o[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const double v = static_cast<double>(to_float(f[j])) + g * static_cast<double>(coarse[j]);
      o[j] = from_float<T>(static_cast<float>(v));
    }
    const std::int64_t dst = b * c.out_strides[0] + i * c.out_strides[1] + h * c.out_strides[2] + e0;
    if constexpr (kVecOut) {
      *reinterpret_cast<uint4*>(out + dst) = *reinterpret_cast<const uint4*>(o);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[dst + j] = o[j];
    }
  }
}

template <class T>
Diagnostics queue(const VsaSelect& s, cudaStream_t st) {
  const int nc = s.cubes.tiles();
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads_q * nc;
  const std::int64_t kv = static_cast<std::int64_t>(s.batch) * s.heads_kv * nc;
  pool_kernel<T><<<stride_loop_grid(rows + 2 * kv), kPoolThreads, 0, st>>>(s, rows, kv);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "video_sparse cube means launch"); !why.ok()) return why;
  const std::int64_t groups = static_cast<std::int64_t>(s.batch) * s.heads_q * ((nc + kRowsPerCta - 1) / kRowsPerCta);
  // configure_vsa_select raised the limit at plan time where this is above 48 KB.
  coarse_kernel<<<stride_loop_grid(groups), kThreads, coarse_smem_bytes(s.head_dim, s.head_dim_v), st>>>(s, groups);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "video_sparse coarse pass launch"); !why.ok()) return why;
  return csr_from_flags({s.flags, s.counts, s.offsets, s.indices, rows, nc}, st);
}

template <class T>
Diagnostics queue_combine(const VsaCombine& c, cudaStream_t st) {
  const std::int64_t rows = static_cast<std::int64_t>(c.batch) * c.seqlen * c.heads_q;
  const bool vec_rows = c.head_dim_v % 8 == 0 && aligned_16(c.fine) && aligned_16(c.coarse);
  const bool vec_out = vec_rows && rows_aligned_16(c.out, c.out_strides);
  if (vec_out)
    combine_kernel<T, 8, true><<<stride_loop_grid((rows * (c.head_dim_v / 8) + kThreads - 1) / kThreads), kThreads, 0, st>>>(c);
  else if (vec_rows)
    combine_kernel<T, 8, false><<<stride_loop_grid((rows * (c.head_dim_v / 8) + kThreads - 1) / kThreads), kThreads, 0, st>>>(c);
  else
    combine_kernel<T, 1, false><<<stride_loop_grid((rows * c.head_dim_v + kThreads - 1) / kThreads), kThreads, 0, st>>>(c);
  return check_cuda(cudaGetLastError(), "video_sparse combine launch");
}

}  // namespace

Diagnostics configure_vsa_select(int head_dim, int head_dim_v) {
  if (head_dim > kMaxCoarseDim) return {};  // vsa_select refuses the shape (AK1012)
  return raise_dynamic_smem(reinterpret_cast<const void*>(coarse_kernel), coarse_smem_bytes(head_dim, head_dim_v),
                            "video_sparse coarse pass");
}

Diagnostics vsa_select(const VsaSelect& s, StreamHandle stream) {
  if (s.batch == 0 || s.heads_q == 0 || s.cubes.tiles() == 0) return {};
  // The plan makes 4 x 4 x 4 cubes; the coarse pass stages d-wide rows in shared memory (48.1 KB at d 256).
  if (s.cubes.tile_tokens() > kCubeTokens || s.head_dim > kMaxCoarseDim)
    return diagnose("AK1012", {{"what", "video_sparse_attn_h3's CUDA selection: cube tokens x head dim"},
                               {"value", std::to_string(s.cubes.tile_tokens()) + " x " + std::to_string(s.head_dim)},
                               {"limit", std::to_string(kCubeTokens) + " x " + std::to_string(kMaxCoarseDim)}});
  auto st = static_cast<cudaStream_t>(stream);
  if (s.dtype == DType::bf16) return queue<__nv_bfloat16>(s, st);
  return queue<__half>(s, st);
}

Diagnostics vsa_combine(const VsaCombine& c, StreamHandle stream) {
  const std::int64_t total = static_cast<std::int64_t>(c.batch) * c.seqlen * c.heads_q * c.head_dim_v;
  if (total == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  if (c.dtype == DType::bf16) return queue_combine<__nv_bfloat16>(c, st);
  return queue_combine<__half>(c, st);
}

}  // namespace attnkit::cuda
