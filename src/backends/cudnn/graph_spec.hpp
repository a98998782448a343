#pragma once
// GraphSpec: everything a cuDNN SDPA graph bakes in. cuDNN compiles a graph for
// fixed dims *and strides*, so a spec is a Problem plus the strides of one
// binding; the graph cache is keyed by it. Plain C++: the cuDNN frontend only
// appears in graph_frontend.cpp.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::cudnn {

// The graph's tensors; also their cuDNN uids and their slots in a VariantPack.
enum class Uid : int {
  q = 1,
  k,
  v,
  o,
  stats,
  seq_q,
  seq_kv,  // per-sequence lengths (padding mask)
  ragged_q,
  ragged_k,
  ragged_v,
  ragged_o,
  ragged_stats,  // THD: per-sequence element offsets
  page_table_k,
  page_table_v,  // paged KV
  sinks,
  descale_q,
  descale_k,
  descale_v,
  descale_s,
  scale_s,
  scale_o,
  amax_s,
  amax_o,  // fp8
  count
};

// Device pointers by uid for one execution (nullptr: not in this graph).
struct VariantPack {
  std::array<void*, static_cast<int>(Uid::count)> ptr{};
  void*& operator[](Uid u) { return ptr[static_cast<int>(u)]; }
};

// A tensor in cuDNN's dim order: (batch, heads, seq, dim); a paged cache is
// (pages, heads, page_size, dim).
struct Dims4 {
  std::array<std::int64_t, 4> dim{}, stride{};
  friend bool operator==(const Dims4&, const Dims4&) = default;
};

// What of a binding a graph depends on beyond the Problem: strides and the
// number of cache pages. Cheap to compute and compare per run.
struct BindingShape {
  std::array<std::int64_t, 4> q{}, k{}, v{}, o{};  // TensorView strides, in the layout's order
  std::array<std::int64_t, 3> lse{};
  std::int64_t sinks = 0;
  std::int64_t pages = 0;  // paged: k.shape[0] (the graph declares the cache's page count)
  friend bool operator==(const BindingShape&, const BindingShape&) = default;
};

// The contiguous binding of a Problem (what plan() builds its graph for):
// every tensor dense in its layout, a paged cache of batch * max_pages pages.
BindingShape canonical_binding(const Problem& p);
// The binding's shape as run() sees it.
BindingShape binding_shape(const Problem& p, const AttentionTensors& t);

struct GraphSpec {
  int device = 0;
  int sm = 0;
  DType io = DType::bf16;   // q, k, v
  DType out = DType::bf16;  // o
  Dims4 q, k, v, o;
  float scale = 1.0f;
  // Masks in attnkit's terms: keys j with i + off - left <= j <= i + off + right
  // stay (off = sk - sq, per sequence when padded); -1 is unbounded.
  int window_left = -1, window_right = -1;
  bool top_left = false;  // fixed sq == sk: off = 0, PyTorch's diagonal (the same mask)
  bool padded = false;    // seq_q / seq_kv tensors and cuDNN's padding mask
  bool ragged = false;    // THD: q, k, v, o (and stats) at per-sequence offsets
  bool offsets_int64 = false;
  bool paged = false;
  std::int64_t page_size = 0, max_pages = 0;  // paged: tables [b, 1, max_pages, 1]
  bool stats = false;                         // the LSE output
  bool stats_ragged = false;                  // THD: stats [total_q, hq] at ragged offsets; else [b, hq, sq]
  Dims4 stats_dims;                           // (b, hq, sq, 1)
  bool sinks = false;
  std::int64_t sinks_stride = 1;

  std::int64_t batch() const { return q.dim[0]; }
  std::int64_t heads_q() const { return q.dim[1]; }
  std::int64_t seqlen_q() const { return q.dim[2]; }
  std::int64_t seqlen_k() const { return paged ? max_pages * page_size : k.dim[2]; }
  bool fp8() const { return io == DType::f8e4m3 || io == DType::f8e5m2; }
  // The cache key: every field.
  std::vector<std::int64_t> key() const;
  std::string summary() const;  // one line for diagnostics and logs
};

// The dims a Problem's graph is built for. Packed (THD) problems round the
// batch and the longest lengths up to powers of two (lengths at least 64), and
// paged caches the page-table width: the lengths that matter reach cuDNN
// through seq_q / seq_kv, so calls whose batch or longest sequence differ a
// little share one graph instead of building their own (~100 ms each).
struct GraphDims {
  std::int64_t batch = 0, seqlen_q = 0, seqlen_k = 0;
  std::int64_t max_pages = 0;  // paged: page-table columns
};
GraphDims graph_dims(const Problem& p);

// The spec of `p` bound as `b`, on device `device` of compute capability `sm`.
// `stats_ragged` picks the THD stats layout (graph_frontend tries ragged first).
GraphSpec make_graph_spec(const Problem& p, const BindingShape& b, int device, int sm, bool stats_ragged);

// Problems whose sequence lengths reach cuDNN through seq_q / seq_kv tensors
// and its padding mask: packed (THD), paged, and masks with seqlen_q > seqlen_k
// (cuDNN's bottom-right diagonal needs the padding mask there).
bool needs_padding_mask(const Problem& p);

}  // namespace attnkit::cudnn
