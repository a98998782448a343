#pragma once
// Which tokens each rank holds under sequence parallelism (USP: ring outer x
// Ulysses inner). Rank = ring_rank * ulysses_degree + ulysses_rank, so a Ulysses
// group is ulysses_degree consecutive ranks (one node's NVLink domain).
//
//   ring chunk of ring rank x:   causal (ring > 1): zigzag, parts x and 2R-1-x
//                                of 2R equal parts (every rank gets one early
//                                and one late part: equal causal work);
//                                otherwise part x of R
//   rank (x, u) holds:           piece u of U of its ring chunk (the chunk's
//                                tokens in order, split in U balanced pieces)
//
// Part i of n tokens split in k is [n*i/k, n*(i+1)/k): uneven lengths differ
// by at most one, and short sequences leave some parts empty. Under joint
// attention the first `replicated_tokens` of every sequence (the text) are on
// every rank and are not part of the split.
#include <cstdint>
#include <vector>

#include "attnkit/core/host_tensor.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::dist {

struct SequenceParallel {
  int ring_degree = 1;
  int ulysses_degree = 1;
  // Joint attention (flux): the first tokens of every q/k/v sequence are whole
  // on every rank; Ulysses slices them to the local heads and gathers them after.
  int replicated_tokens = 0;
  int sp_degree() const { return ring_degree * ulysses_degree; }
};

// A run of tokens at positions [start, start + length) of the split part of a sequence.
struct TokenRange {
  std::int64_t start = 0;
  std::int64_t length = 0;
  friend bool operator==(const TokenRange&, const TokenRange&) = default;
};

TokenRange balanced_part(std::int64_t n, int parts, int index);
// Whether the ring chunks are zigzag: ring_degree > 1 and a causal mask.
bool uses_zigzag(const Problem& p, const SequenceParallel& sp);
// The ring chunk of ring rank `ring_rank` for a split length n, in order.
std::vector<TokenRange> ring_chunk(std::int64_t n, int ring_degree, int ring_rank, bool zigzag);
// The tokens rank `rank` holds of a split length n, in the local order.
std::vector<TokenRange> rank_tokens(std::int64_t n, const SequenceParallel& sp, int rank, bool zigzag);

// Every rank's share of one problem's sequences.
class Sharding {
 public:
  // q_lens / k_lens: the whole (global) length of every sequence, text included.
  Sharding(const Problem& global, const SequenceParallel& sp, std::vector<int> q_lens, std::vector<int> k_lens);
  // From the problem alone (every sequence seqlen_q / seqlen_k long).
  Sharding(const Problem& global, const SequenceParallel& sp);

  const SequenceParallel& parallel() const { return sp_; }
  bool zigzag() const { return zigzag_; }
  int batch() const { return static_cast<int>(q_lens_.size()); }
  int q_len(int b) const { return q_lens_[b]; }
  int k_len(int b) const { return k_lens_[b]; }
  // Split tokens of sequence b held by `rank` (positions after the text), in local order.
  std::vector<TokenRange> q_tokens(int rank, int b) const;
  std::vector<TokenRange> k_tokens(int rank, int b) const;
  // Local length of sequence b on `rank`: the text plus its split tokens.
  std::int64_t local_q_len(int rank, int b) const;
  std::int64_t local_k_len(int rank, int b) const;
  // The local problem of `rank`: the global one with local lengths (THD: the
  // longest local sequence); what its tensors are checked against.
  Problem local_problem(int rank) const;

 private:
  Problem global_;
  SequenceParallel sp_;
  bool zigzag_;
  std::vector<int> q_lens_, k_lens_;
};

// Host copies of one rank's shard, laid out as the rank's local tensors: what
// tests, `attnkit run` and the Python helpers hand to a sequence-parallel plan.
// `global` is a q/k/v/out-like tensor of the whole problem in `layout`;
// `k_side` picks the k lengths.
HostTensor shard_tokens(const TensorView& global, Layout layout, const Sharding& s, int rank, bool k_side);
// The same for an LSE tensor ([b, h, s] or [h, tokens]).
HostTensor shard_lse(const TensorView& global, Layout layout, const Sharding& s, int rank);
// The local cu_seqlens of `rank` (THD): prefix sums of its local lengths.
std::vector<std::int32_t> local_cu_seqlens(const Sharding& s, int rank, bool k_side);

// One rank's shard of a whole host problem: q, k, v cut from `data`, outputs
// poisoned; `tensors` views them plus data's sinks and (global) cu_seqlens, so
// `data` must outlive it.
struct HostShard {
  HostTensor q, k, v, out, lse;
  AttentionTensors tensors;
};
HostShard make_host_shard(const HostProblemData& data, const Sharding& s, int rank);

}  // namespace attnkit::dist
