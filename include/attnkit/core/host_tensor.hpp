#pragma once
// Owning host tensors and random problem data: what the CLI `run` command, the
// tests and the benchmarks use to build an attention call without a framework.
#include <cstdint>
#include <vector>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit {

class HostTensor {
 public:
  HostTensor() = default;
  // Contiguous, 64-byte aligned storage; contents zeroed.
  HostTensor(DType dtype, std::initializer_list<std::int64_t> shape);
  HostTensor(DType dtype, const std::vector<std::int64_t>& shape);

  const TensorView& view() const { return view_; }
  // Fills with NaN (float types) or 0xAB bytes, so an unwritten element shows.
  void poison();

 private:
  std::vector<std::byte> storage_;
  TensorView view_{};
};

struct ProblemDataOptions {
  std::uint64_t seed = 0;
  // Varlen (THD) or paged: per-sequence lengths (size = batch). Empty: every
  // sequence has seqlen_q / seqlen_k tokens.
  std::vector<int> q_lens;
  std::vector<int> k_lens;
  double mask_density = 0.6;  // fraction of kept blocks / elements for block-sparse lists / custom masks
  double empty_block_rows = 0.0;  // block-sparse: fraction of query blocks whose list is empty
  // Keys at position j of a sequence of n scaled by 1 + key_growth * j / (n - 1): the
  // logits grow along each row, so a row's running maximum keeps rising past its first
  // key tiles (what lazy rescaling's moves need to be exercised). 0: plain normal keys.
  double key_growth = 0.0;
};

// Random inputs (standard normal q, k, v and sinks, gates uniform in [0, 1), random masks and
// block-sparse lists, a shuffled paged block table) and poisoned outputs for a
// Problem. Refuses (AK1013) a problem whose buffers do not fit in this
// machine's available memory.
class HostProblemData {
 public:
  static Result<HostProblemData> create(const Problem& p, const ProblemDataOptions& options = {});

  const Problem& problem() const { return problem_; }
  AttentionTensors tensors() const;
  // The same inputs with other outputs (e.g. fp64 buffers for the reference).
  AttentionTensors tensors_with_outputs(const TensorView& out, const TensorView& lse) const;
  // Allocates outputs of this problem's shape in `dtype` (LSE stays fp32).
  HostTensor make_output(DType dtype) const;
  HostTensor make_lse() const;
  void poison_outputs();
  const std::vector<int>& q_lens() const { return q_lens_; }
  const std::vector<int>& k_lens() const { return k_lens_; }
  std::int64_t total_q() const;

 private:
  // Allocates and fills every buffer (create() has checked their sizes).
  void fill(const ProblemDataOptions& o, std::int64_t total_q, std::int64_t total_k, std::int64_t max_pages,
            std::int64_t total_pages);
  Problem problem_;
  std::vector<int> q_lens_, k_lens_;
  HostTensor q_, k_, v_, out_, lse_, sinks_, gate_, cu_q_, cu_k_, block_table_, seqlens_k_, block_offsets_, block_indices_,
      custom_mask_;
};

}  // namespace attnkit
