// video_sparse_attn_h3's selection and combine kernels (vsa_select.hpp). The
// means, scores and ranking are sparse/video_sparse_rule.hpp's, which the
// host runs too, over the tokens, dims and cubes in the host's order
// (sparse/video_sparse.cpp pool_cubes, video_sparse_backend.cpp).
#include <cuda_runtime.h>

#include <cmath>

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
constexpr int kMaxCoarseDim = 256;  // q_s + k_s stay under 48 KB of shared memory

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

// How many of the row's scores have a key of at least `key` (every lane gets it).
__device__ __forceinline__ int warp_count_at_least(const double* score, int nc, std::uint64_t key) {
  int count = 0;
  for (int c0 = 0; c0 < nc; c0 += 32) {
    const int c = c0 + static_cast<int>(threadIdx.x % 32);
    count += __popc(__ballot_sync(0xffffffffu, c < nc && sparse::vsa_score_key(score[c]) >= key));
  }
  return count;
}

// The coarse pass of kRowsPerCta query cubes a of one (sequence, head), warp
// w taking query cube a0 + w:
//   1. C[a, c] for every key cube c (sparse::vsa_cube_score: each lane one key
//      cube of the staged chunk, its dims in order), into `scores`;
//   2. the kept flags: cube c is kept when fewer than `keep` cubes rank before
//      it. The keep-th largest key T is found bit by bit (the largest T with
//      at least `keep` keys >= T); keys above T are kept, and of the keys equal
//      to T the lowest cubes, as many as are still missing;
//   3. the softmax weights in place of the scores and the coarse output
//      softmax(C) . v_mean (each lane some dims, the cubes in order).
// Before (one CTA per query cube, each thread ranking its cubes against all
// others, k means read 512 bytes apart): 4.2 ms at 20 x 32 x 48 latents,
// 24 heads (11520 rows of 480 cubes), H200, 2026-12-02.
__global__ void __launch_bounds__(kThreads) coarse_kernel(VsaSelect s, std::int64_t groups) {
  extern __shared__ float smem[];  // q means [kRowsPerCta][d], key-cube means [kChunk][d + 1]
  const int nc = s.cubes.tiles(), d = s.head_dim, dv = s.head_dim_v, group = s.heads_q / s.heads_kv;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int per_slice = (nc + kRowsPerCta - 1) / kRowsPerCta;
  float* q_s = smem;
  float* k_s = smem + kRowsPerCta * d;
  for (std::int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const std::int64_t slice = g / per_slice;  // b * heads_q + h
    const int a0 = static_cast<int>(g % per_slice) * kRowsPerCta;
    const int h = static_cast<int>(slice % s.heads_q), b = static_cast<int>(slice / s.heads_q);
    const std::int64_t kv0 = (static_cast<std::int64_t>(b) * s.heads_kv + h / group) * nc;
    const int a = a0 + warp;
    const bool active = a < nc;
    const std::int64_t r = slice * nc + a;  // this warp's CSR row
    double* score = s.scores + r * nc;
    __syncthreads();  // the previous group is done with q_s and k_s
    for (int x = threadIdx.x; x < kRowsPerCta * d; x += blockDim.x) {
      const int row = a0 + x / d;
      q_s[x] = row < nc ? s.q_mean[(slice * nc + row) * d + x % d] : 0.f;
    }
    for (int c0 = 0; c0 < nc; c0 += kChunk) {
      const int chunk = min(kChunk, nc - c0);
      __syncthreads();  // q_s is written; the previous chunk's scores are done
      for (int x = threadIdx.x; x < chunk * d; x += blockDim.x)
        k_s[(x / d) * (d + 1) + x % d] = s.k_mean[(kv0 + c0) * d + x];
      __syncthreads();
      if (active && lane < chunk)
        score[c0 + lane] = sparse::vsa_cube_score(q_s + warp * d, k_s + lane * (d + 1), d, s.scale);
    }
    if (!active) continue;  // no barrier below: each warp finishes its own row
    __syncwarp();           // the lanes' scores are visible to the warp
    std::uint64_t cut = 0;
    for (int bit = 63; bit >= 0; --bit) {
      const std::uint64_t candidate = cut | (std::uint64_t{1} << bit);
      if (warp_count_at_least(score, nc, candidate) >= s.keep) cut = candidate;
    }
    // Keys above the cut are kept; of those equal to it, the lowest cubes up to `keep`.
    const int above = cut == ~std::uint64_t{0} ? 0 : warp_count_at_least(score, nc, cut + 1);
    int ties_seen = 0, kept = 0;  // keys equal to the cut in the cubes before this chunk
    double top = -INFINITY;
    std::uint8_t* flag = s.flags + r * nc;
    for (int c0 = 0; c0 < nc; c0 += 32) {
      const int c = c0 + lane;
      const double sc = c < nc ? score[c] : 0.0;
      const std::uint64_t key = c < nc ? sparse::vsa_score_key(sc) : 0;
      const unsigned tie = __ballot_sync(0xffffffffu, c < nc && key == cut);
      const int ties_before = ties_seen + __popc(tie & ((1u << lane) - 1u));
      const bool k = c < nc && sparse::vsa_kept_by_cut(key, cut, ties_before, s.keep, above);
      if (c < nc) {
        flag[c] = k ? 1 : 0;
        top = fmax(top, sc);
      }
      kept += __popc(__ballot_sync(0xffffffffu, k));
      ties_seen += __popc(tie);
    }
    for (int o = 16; o > 0; o >>= 1) top = fmax(top, __shfl_xor_sync(0xffffffffu, top, o));
    double total = 0.0;
    for (int c = lane; c < nc; c += 32) total += score[c] = exp(score[c] - top);
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    __syncwarp();  // the weights are visible to the warp
    for (int e = lane; e < dv; e += 32) {
      double acc = 0.0;
      for (int c = 0; c < nc; ++c) acc += score[c] * static_cast<double>(s.v_mean[(kv0 + c) * dv + e]);
      s.coarse[r * dv + e] = static_cast<float>(acc / total);
    }
    if (lane == 0) s.counts[r] = kept;
  }
}

// One CTA per token (b, i) of q's order: its cube and gate found once, each
// thread some (head, dim) pairs. Before (one thread per element, each finding
// its cube and indices with 64-bit divisions): 1.5 ms at the bench shape.
template <class T>
__global__ void __launch_bounds__(kThreads) combine_kernel(VsaCombine c) {
  const int n = c.cubes.tile_tokens(), nc = c.cubes.tiles(), width = c.heads_q * c.head_dim_v;
  const std::int64_t tokens = static_cast<std::int64_t>(c.batch) * c.seqlen;
  const T* fine = static_cast<const T*>(c.fine);
  T* out = static_cast<T*>(c.out);
  for (std::int64_t u = blockIdx.x; u < tokens; u += gridDim.x) {  // u = b * seqlen + i
    const int b = static_cast<int>(u / c.seqlen);
    const std::int64_t i = u % c.seqlen, cube = tile_order_index(c.cubes, i) / n;
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
      const int h = j / c.head_dim_v, e = j - h * c.head_dim_v;
      const std::int64_t row = (static_cast<std::int64_t>(b) * c.heads_q + h) * nc + cube;
      const double g = c.gate[gate_offset(c.layout, c.gate_strides, b, h, i, 0)];
      const double v = static_cast<double>(to_float(fine[u * width + j])) +
                       g * static_cast<double>(c.coarse[row * c.head_dim_v + e]);
      out[b * c.out_strides[0] + i * c.out_strides[1] + h * c.out_strides[2] + e] = from_float<T>(static_cast<float>(v));
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
  const std::size_t smem = sizeof(float) * (kRowsPerCta * s.head_dim + kChunk * (s.head_dim + 1));
  coarse_kernel<<<stride_loop_grid(groups), kThreads, smem, st>>>(s, groups);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "video_sparse coarse pass launch"); !why.ok()) return why;
  return csr_from_flags({s.flags, s.counts, s.offsets, s.indices, rows, nc}, st);
}

}  // namespace

Diagnostics vsa_select(const VsaSelect& s, StreamHandle stream) {
  if (s.batch == 0 || s.heads_q == 0 || s.cubes.tiles() == 0) return {};
  // The plan makes 4 x 4 x 4 cubes; the coarse pass stages d-wide rows in shared memory (41 KB at d 256).
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
  const unsigned grid = stride_loop_grid(static_cast<std::int64_t>(c.batch) * c.seqlen);
  if (c.dtype == DType::bf16) combine_kernel<__nv_bfloat16><<<grid, kThreads, 0, st>>>(c);
  else combine_kernel<__half><<<grid, kThreads, 0, st>>>(c);
  return check_cuda(cudaGetLastError(), "video_sparse combine launch");
}

}  // namespace attnkit::cuda
