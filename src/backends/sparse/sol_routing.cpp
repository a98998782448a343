#include "backends/sparse/sol_routing.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_memory.hpp"

namespace attnkit::sparse {
namespace {

constexpr int kBlock = kSolBlock;

double load(const Problem& p, const TensorView& x, int b, int h, std::int64_t row, int c) {
  const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
  return load_as_double(x.data, x.dtype, r.offset + row * r.row_stride + c);
}

}  // namespace

Problem sol_pooled_problem(const Problem& p) {
  Problem q;
  q.layout = Layout::bshd;
  q.batch = p.batch;
  q.seqlen_q = p.seqlen_q;
  q.seqlen_k = num_blocks(p.seqlen_k, kBlock);
  q.heads_q = p.heads_q;
  q.heads_kv = p.heads_kv;
  q.head_dim_qk = p.head_dim_qk + 1;
  q.head_dim_v = p.head_dim_v;
  q.dtype = DType::f32;
  q.mask = MaskKind::custom;
  q.scale = p.softmax_scale();
  q.return_lse = true;
  return q;
}

// k'[b, c, h] = [mean of tile c's keys, ln(tokens) / scale], v'[b, c, h] = mean of its values;
// q'[b, i, h] = [q, 1].
void sol_pool_host(const Problem& p, const AttentionTensors& t, float* q1, float* k1, float* v1) {
  const int d1 = p.head_dim_qk + 1, dv = p.head_dim_v;
  const int tiles = num_blocks(p.seqlen_k, kBlock);
  const double scale = p.softmax_scale();
  const std::int64_t units = static_cast<std::int64_t>(p.batch) * tiles * p.heads_kv;
#pragma omp parallel for num_threads(host_threads()) schedule(static)
  for (std::int64_t u = 0; u < units; ++u) {  // u = (b * tiles + c) * heads_kv + h
    const int h = static_cast<int>(u % p.heads_kv), c = static_cast<int>(u / p.heads_kv % tiles),
              b = static_cast<int>(u / p.heads_kv / tiles);
    const int lo = c * kBlock, hi = std::min(p.seqlen_k, lo + kBlock), n = hi - lo;
    for (int d = 0; d < p.head_dim_qk; ++d) {
      double sum = 0;
      for (int j = lo; j < hi; ++j) sum = unfused_add(sum, load(p, t.k, b, h, j, d));
      k1[u * d1 + d] = sol_tile_mean(sum, n);
    }
    k1[u * d1 + p.head_dim_qk] = static_cast<float>(std::log(static_cast<double>(n)) / scale);
    for (int d = 0; d < dv; ++d) {
      double sum = 0;
      for (int j = lo; j < hi; ++j) sum = unfused_add(sum, load(p, t.v, b, h, j, d));
      v1[u * dv + d] = sol_tile_mean(sum, n);
    }
  }
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.seqlen_q * p.heads_q;
#pragma omp parallel for num_threads(host_threads()) schedule(static)
  for (std::int64_t u = 0; u < rows; ++u) {  // u = (b * seqlen + i) * heads_q + h
    const int h = static_cast<int>(u % p.heads_q), i = static_cast<int>(u / p.heads_q % p.seqlen_q),
              b = static_cast<int>(u / p.heads_q / p.seqlen_q);
    for (int d = 0; d < p.head_dim_qk; ++d) q1[u * d1 + d] = static_cast<float>(load(p, t.q, b, h, i, d));
    q1[u * d1 + p.head_dim_qk] = 1.0f;
  }
}

// keep[r][c] for every row r = (b, h, query block): Sol-Attn's routing.
void sol_route_host(const Problem& p, const SolSettings& s, const float* q1, const float* k1, std::uint8_t* keep) {
  const SolShape shape = SolShape::of(p);
  const int nq = shape.nq, d = p.head_dim_qk, d1 = d + 1, T = shape.tiles;
  const double scale = p.softmax_scale();
#pragma omp parallel for num_threads(host_threads()) schedule(static)
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    const int qb = static_cast<int>(r % nq), h = static_cast<int>(r / nq % p.heads_q),
              b = static_cast<int>(r / nq / p.heads_q), hk = h / p.gqa_ratio();
    const int lo = qb * kBlock, hi = std::min(p.seqlen_q, lo + kBlock);
    double q_mean[SolSettings::kMaxHeadDim] = {};
    double z[SolSettings::kMaxTiles];
    for (int i = lo; i < hi; ++i)
      for (int c = 0; c < d; ++c)
        q_mean[c] = unfused_add(q_mean[c], sol_q_mean_term(q1[((static_cast<std::int64_t>(b) * p.seqlen_q + i) * p.heads_q + h) * d1 + c],
                                                       hi - lo));
    for (int c = 0; c < T; ++c)
      z[c] = sol_proxy_score(q_mean, k1 + ((static_cast<std::int64_t>(b) * T + c) * p.heads_kv + hk) * d1, d, scale);
    sol_route(s, {z, static_cast<std::size_t>(T)}, qb, p.seqlen_k, {keep + r * T, static_cast<std::size_t>(T)});
  }
}

std::int64_t sol_lists_host(const SolShape& shape, const std::uint8_t* keep, std::int32_t* offsets,
                            std::int32_t* indices) {
  const int T = shape.tiles;
  offsets[0] = 0;
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    std::int32_t n = 0;
    for (int c = 0; c < T; ++c) n += keep[r * T + c];
    offsets[r + 1] = offsets[r] + n;
  }
#pragma omp parallel for num_threads(host_threads()) schedule(static)
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    std::int32_t e = offsets[r];
    for (int c = 0; c < T; ++c)
      if (keep[r * T + c]) indices[e++] = c;
  }
  return offsets[shape.rows];
}

}  // namespace attnkit::sparse
