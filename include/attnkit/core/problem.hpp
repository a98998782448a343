#pragma once
// Problem: the description of one attention call, without its data. Selection
// and validation work on Problems alone (no GPU, no memory); kernels receive the
// Problem plus an AttentionTensors binding the actual buffers.
//
//   O[b, h, i, :] = sum_j softmax_j(S[b, h, i, j]) V[b, g(h), j, :]
//   S = scale * Q[b, h, i, :] . K[b, g(h), j, :]   (then softcap, then mask)
//   g(h) = h / (heads_q / heads_kv)                 (GQA / MQA)
#include <cstdint>
#include <optional>
#include <string>

#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/dtype.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit {

// BSHD: [batch, seq, heads, dim]; BHSD: [batch, heads, seq, dim];
// THD: packed [total_tokens, heads, dim] with cu_seqlens [batch + 1].
enum class Layout : std::uint8_t { bshd, bhsd, thd };
std::string_view layout_name(Layout l);
std::optional<Layout> parse_layout(std::string_view s);

// Causal is bottom-right aligned: with sq queries over sk keys, query i sees
// keys j <= i + (sk - sq). A sliding window (left, right) around that diagonal
// sees j in [i + off - left, i + off + right]; -1 means unbounded on that side.
// Block sparsity is not a MaskKind: it composes with every kind (see BlockSparse).
enum class MaskKind : std::uint8_t { none, causal, sliding_window, custom };
inline constexpr MaskKind kAllMaskKinds[] = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window, MaskKind::custom};
std::string_view mask_kind_name(MaskKind m);

struct Window {
  int left = -1;
  int right = -1;
  friend bool operator==(const Window&, const Window&) = default;
};

// Block sparsity: per query block, the list of key blocks it attends to, in
// CSR form (AttentionTensors::block_offsets / block_indices; index math and
// the contract in core/block_sparse.hpp). A listed block is visible as a
// whole except that the Problem's mask (causal, sliding window, custom)
// still applies inside it; an unlisted block is never read. A query row that
// sees no key (an empty list, or listed blocks all masked) outputs 0 and LSE
// -inf, as any fully masked row.
//   query block qb covers queries [qb * block_q, (qb + 1) * block_q) of its sequence,
//   key block kb covers keys      [kb * block_k, (kb + 1) * block_k) of its sequence.
// `batch` and `heads` say how many distinct lists the layout holds in those
// dimensions: 1 (one list shared by every sequence / every head) or
// Problem::batch / Problem::heads_q (one per sequence / per query head).
struct BlockSparse {
  int block_q = 128;  // > 0, a multiple of 16
  int block_k = 128;  // > 0, a multiple of 16
  int batch = 1;      // 1 or Problem::batch
  int heads = 1;      // 1 or Problem::heads_q
  friend bool operator==(const BlockSparse&, const BlockSparse&) = default;
};

// The token layout of a video DiT call, what sparse video backends read
// (dense backends ignore it): the first frames * height * width tokens of
// every sequence are the latent grid in raster order (frame slowest, width
// fastest, core/video_tiles.hpp); the tokens after them are text tokens of
// joint attention.
struct VideoGrid {
  int frames = 0, height = 0, width = 0;
  std::int64_t tokens() const { return static_cast<std::int64_t>(frames) * height * width; }
  friend bool operator==(const VideoGrid&, const VideoGrid&) = default;
};

// Paged KV cache: K/V are [num_pages, page_size, heads_kv, dim]; sequence b's
// key j lives in page block_table[b, j / page_size] at row j % page_size, and
// seqlens_k[b] keys are valid.
struct PagedKv {
  int page_size = 16;
  friend bool operator==(const PagedKv&, const PagedKv&) = default;
};

// Limits that keep every index computation exact: sequence lengths below 2^30
// (so i + (sk - sq) +- a clamped window side fits in an int), and every tensor
// below 2^48 elements (so element and byte offsets fit in 64 bits with room).
inline constexpr int kMaxSeqlen = 1 << 30;
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
// Softmax scale and softcap live in [kMinScale, kMaxScale]: the fp32 score
// arithmetic of every backend stays finite for fp16/bf16-range inputs.
inline constexpr float kMinScale = 1e-6f;
inline constexpr float kMaxScale = 1e6f;

struct Problem {
  Layout layout = Layout::bshd;
  int batch = 1;
  int seqlen_q = 1;  // THD: the longest sequence (max_seqlen_q)
  int seqlen_k = 1;  // THD / paged: the longest sequence (max_seqlen_k)
  int heads_q = 1;
  int heads_kv = 1;
  int head_dim_qk = 64;
  int head_dim_v = 64;
  DType dtype = DType::bf16;     // q, and k/v unless kv_dtype is set
  std::optional<DType> kv_dtype;  // e.g. an fp8 KV cache under bf16 queries
  std::optional<DType> out_dtype_override;  // default: dtype (bf16 for fp8/int8 inputs)
  MaskKind mask = MaskKind::none;
  Window window{};               // used when mask == sliding_window
  std::optional<BlockSparse> block_sparse;  // set: only the listed key blocks are attended (with `mask` inside them)
  float softcap = 0.0f;          // > 0: s <- softcap * tanh(s / softcap)
  std::optional<float> scale;    // default 1 / sqrt(head_dim_qk)
  bool has_sinks = false;        // per-head sink logit [heads_q] (fp32), joins the denominator
  // A per-token, per-head gate (fp32, q's layout without the head dim) that
  // scales a second branch of the backends that have one (the coarse branch of
  // video_sparse_attn_h3, the linear branch of hybrid_window_attn_h3;
  // docs/sparse.md). Other backends refuse it (AK2109).
  bool has_gate = false;
  bool return_lse = false;       // natural-log LSE (fp32): [batch, heads_q, seqlen_q] or [heads_q, total_q]
  // Causal / window masks of a shard of longer sequences (ring attention): query
  // i of sequence b is aligned with key i + diagonal_offsets[b] (int32 [batch],
  // host) instead of the bottom-right diagonal i + (sk - sq).
  bool diagonal_offsets = false;
  std::optional<PagedKv> paged_kv;
  std::optional<VideoGrid> video;  // video latents first in each sequence (sparse video backends)
  // fp8 inputs are stored scaled; the math uses x * descale.
  float q_descale = 1.0f, k_descale = 1.0f, v_descale = 1.0f;

  DType k_dtype() const { return kv_dtype.value_or(dtype); }
  DType out_dtype() const;
  float softmax_scale() const;
  int gqa_ratio() const { return heads_kv > 0 ? heads_q / heads_kv : 0; }
  bool is_varlen() const { return layout == Layout::thd; }
  // Effective (left, right) window for causal / sliding window, (-1, -1) otherwise.
  // A side reaching past every sequence (left >= seqlen_k, right >= seqlen_q)
  // is returned as -1, the same mask on the bottom-right diagonal (not with
  // diagonal_offsets, where the diagonal may lie anywhere).
  Window effective_window() const;
  // Multiply-adds of the two matmuls, 2 FLOP each, over the visible (i, j) pairs
  // of the longest-sequence shape: 2*b*h*sq*sk*(dqk+dv) halved for causal.
  // Block sparsity is not counted (the lists are data): block_sparse_flops()
  // in core/block_sparse.hpp counts the listed blocks only.
  double flops() const;
  std::string summary() const;  // one line, for logs
  // Field by field: two calls with equal Problems can share one Plan.
  friend bool operator==(const Problem&, const Problem&) = default;
};

// Structural checks of a Problem on its own (positive sizes, head ratio, dims,
// window values, scale ranges, dtype combinations, the size limits above).
// Empty result means valid.
Diagnostics validate_problem(const Problem& p);

}  // namespace attnkit
