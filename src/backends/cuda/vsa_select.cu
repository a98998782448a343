// video_sparse_attn_h3's selection and combine kernels (vsa_select.hpp). The
// means, scores and ranking are sparse/video_sparse_rule.hpp's, which the
// host runs too, over the tokens, dims and cubes in the host's order
// (sparse/video_sparse.cpp pool_cubes, video_sparse_backend.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/sparse/video_sparse_rule.hpp"
#include "backends/cuda/csr_lists.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/vsa_select.hpp"
#include "kernels/cuda/common/math.hpp"
#include "kernels/cuda/cuda_types.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPoolThreads = 128;
constexpr std::int64_t kMaxGrid = 1 << 16;  // grid-stride loops beyond

unsigned grid_for(std::int64_t work) { return static_cast<unsigned>(std::clamp<std::int64_t>(work, 1, kMaxGrid)); }

// One CTA per cube of one (sequence, head) slice of q, k or v (q's first,
// then k's, then v's): each thread a dim, summing the cube's tokens in tile order.
template <class T>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(VsaSelect s, std::int64_t q_cubes, std::int64_t kv_cubes) {
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
    for (int e = threadIdx.x; e < d; e += blockDim.x) {
      double sum = 0.0;
      for (int t = 0; t < n; ++t) {
        const std::int64_t r = raster_index(s.cubes, static_cast<std::int64_t>(c) * n + t);
        sum = unfused_add(sum, static_cast<double>(to_float(x[b * st[0] + r * st[1] + h * st[2] + e])));
      }
      mean[e] = sparse::vsa_cube_mean(sum, n);
    }
  }
}

// One CTA per CSR row r = (b, h, query cube a): the scores C[a, c] (each
// thread a key cube, its dims in order), the kept flags (a cube is kept when
// fewer than `keep` cubes rank before it), then the softmax weights in place
// of the scores and the coarse output (each thread a dim, the cubes in order).
__global__ void __launch_bounds__(kThreads) coarse_kernel(VsaSelect s, std::int64_t rows) {
  __shared__ double red[kThreads / 32];
  __shared__ int kept;
  const int nc = s.cubes.tiles(), d = s.head_dim, dv = s.head_dim_v, group = s.heads_q / s.heads_kv;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int h = static_cast<int>(r / nc % s.heads_q), b = static_cast<int>(r / nc / s.heads_q);
    const std::int64_t kv0 = (static_cast<std::int64_t>(b) * s.heads_kv + h / group) * nc;
    const float* qa = s.q_mean + r * d;
    double* score = s.scores + r * nc;
    std::uint8_t* flag = s.flags + r * nc;
    __syncthreads();  // the previous row is done with `kept` and its scores
    if (threadIdx.x == 0) kept = 0;
    double top = -INFINITY;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
      score[c] = sparse::vsa_cube_score(qa, s.k_mean + (kv0 + c) * d, d, s.scale);
      top = fmax(top, score[c]);
    }
    top = block_reduce(top, true, red);  // its barriers also publish the scores
    int mine = 0;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
      const double sc = score[c];
      int before = 0;
      for (int o = 0; o < nc; ++o) before += sparse::vsa_ranks_before(score[o], o, sc, c);
      const bool k = before < s.keep;
      flag[c] = k ? 1 : 0;
      mine += k;
    }
    atomicAdd(&kept, mine);
    __syncthreads();  // every thread has ranked against the scores
    double total = 0.0;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) total += score[c] = exp(score[c] - top);
    total = block_reduce(total, false, red);  // publishes the weights
    for (int e = threadIdx.x; e < dv; e += blockDim.x) {
      double acc = 0.0;
      for (int c = 0; c < nc; ++c) acc += score[c] * static_cast<double>(s.v_mean[(kv0 + c) * dv + e]);
      s.coarse[r * dv + e] = static_cast<float>(acc / total);
    }
    if (threadIdx.x == 0) s.counts[r] = kept;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) combine_kernel(VsaCombine c) {
  const int n = c.cubes.tile_tokens(), nc = c.cubes.tiles();
  const std::int64_t total = static_cast<std::int64_t>(c.batch) * c.seqlen * c.heads_q * c.head_dim_v;
  const T* fine = static_cast<const T*>(c.fine);
  T* out = static_cast<T*>(c.out);
  for (std::int64_t x = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int e = static_cast<int>(x % c.head_dim_v);
    const std::int64_t u = x / c.head_dim_v;  // (b * seqlen + i) * heads_q + h
    const int h = static_cast<int>(u % c.heads_q), b = static_cast<int>(u / c.heads_q / c.seqlen);
    const std::int64_t i = u / c.heads_q % c.seqlen;
    const std::int64_t row = (static_cast<std::int64_t>(b) * c.heads_q + h) * nc + tile_order_index(c.cubes, i) / n;
    const double g = c.gate[gate_offset(c.layout, c.gate_strides, b, h, i, 0)];
    const double v = static_cast<double>(to_float(fine[x])) + g * static_cast<double>(c.coarse[row * c.head_dim_v + e]);
    out[b * c.out_strides[0] + i * c.out_strides[1] + h * c.out_strides[2] + e] = from_float<T>(static_cast<float>(v));
  }
}

template <class T>
Diagnostics queue(const VsaSelect& s, cudaStream_t st) {
  const int nc = s.cubes.tiles();
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads_q * nc;
  const std::int64_t kv = static_cast<std::int64_t>(s.batch) * s.heads_kv * nc;
  pool_kernel<T><<<grid_for(rows + 2 * kv), kPoolThreads, 0, st>>>(s, rows, kv);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "video_sparse cube means launch"); !why.ok()) return why;
  coarse_kernel<<<grid_for(rows), kThreads, 0, st>>>(s, rows);
  if (Diagnostics why = check_cuda(cudaGetLastError(), "video_sparse coarse pass launch"); !why.ok()) return why;
  return csr_from_flags({s.flags, s.counts, s.offsets, s.indices, rows, nc}, st);
}

}  // namespace

Diagnostics vsa_select(const VsaSelect& s, StreamHandle stream) {
  if (s.batch == 0 || s.heads_q == 0 || s.cubes.tiles() == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  if (s.dtype == DType::bf16) return queue<__nv_bfloat16>(s, st);
  return queue<__half>(s, st);
}

Diagnostics vsa_combine(const VsaCombine& c, StreamHandle stream) {
  const std::int64_t total = static_cast<std::int64_t>(c.batch) * c.seqlen * c.heads_q * c.head_dim_v;
  if (total == 0) return {};
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned grid = grid_for((total + kThreads - 1) / kThreads);
  if (c.dtype == DType::bf16) combine_kernel<__nv_bfloat16><<<grid, kThreads, 0, st>>>(c);
  else combine_kernel<__half><<<grid, kThreads, 0, st>>>(c);
  return check_cuda(cudaGetLastError(), "video_sparse combine launch");
}

}  // namespace attnkit::cuda
