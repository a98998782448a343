#pragma once
// sparge_attn (SpargeAttn, arXiv 2502.18137): per (sequence, head), query
// blocks of 128 and key blocks of 64 tokens are mean-pooled; a query block
// attends to the key blocks its pooled similarity ranks highest:
//   P[qb, kb] = softmax_kb(scale * mean(q_qb) . mean(k_kb)),
// the top ceil(topk * key blocks) of P, or (cdfthreshd set) the fewest blocks
// whose P sums to cdfthreshd. A block whose tokens are not alike (mean
// pairwise cosine similarity <= simthreshd1) is not summarised by its mean:
// such a key block is attended by every query block, such a query block
// attends to every key block. Calls shorter than 128 queries, or with
// seqlen_q != seqlen_k, run dense (recorded). The exact rule is in
// docs/sparse.md; these host functions are what a CUDA plan shares.
#include <span>
#include <string>

#include "attnkit/backends/backend.hpp"

namespace attnkit::sparse {

struct SpargeSettings {
  static constexpr int kBlockQ = 128, kBlockK = 64;
  static constexpr int kMinSeqlen = 128;  // shorter calls run dense
  double topk = 0.5;
  double cdfthreshd = 0.0;  // > 0: the cumulative-probability rule instead of topk
  double simthreshd1 = -0.1;
};
// The sparge_attn keys of a config validated against its schema (which
// refuses topk with cdfthreshd: AK3111).
SpargeSettings sparge_settings(const select::BackendConfig& config);

// One block of n vectors (rows of `x`, dim d): writes their mean to `mean`
// and returns their mean pairwise cosine similarity, each vector counted with
// itself: |sum of unit vectors|^2 / n^2. `scratch`: d doubles.
double pool_block(const float* x, int n, int d, float* mean, double* scratch);

// The blocks the top-k rule keeps of `key_blocks`: ceil(topk * key_blocks),
// at least one (before capping at the smooth blocks there are).
int sparge_topk_blocks(double topk, int key_blocks);

// The key blocks one query block keeps, from the pooled scores (one per key
// block, -inf for non-smooth key blocks, which are kept regardless) and
// whether the query block itself is smooth. keep[kb] = 1 for a kept block.
// Scratch: `prob` and `order` of scores.size() entries.
void sparge_select(const SpargeSettings& s, std::span<const double> scores, bool query_smooth,
                   std::span<std::uint8_t> keep, std::span<double> prob, std::span<std::uint32_t> order);

}  // namespace attnkit::sparse
