#pragma once
// Sequence-parallel attention (design 4, "parallel"): USP, ring attention
// (outer) x Ulysses (inner), on a Communicator (MPI on CPUs, NCCL on GPUs).
//
//   Ulysses: one all-to-all turns sequence shards into head shards (q, k and v
//            packed in one collective): each rank then holds heads / U heads of
//            its ring chunk; the inverse all-to-all brings the output back.
//   Ring:    K/V blocks of the ring chunks travel around the R ranks of a ring,
//            double-buffered, each send/receive overlapping the compute of the
//            current block; partial results merge by their LSE (core/lse_merge).
//
// A plan wraps the plans of an inner backend (cpu_flash on the CPU, fa2 /
// cuda_sdpa on GPUs); ring > 1 needs one that returns the LSE (ring_capable()).
#include <memory>
#include <optional>
#include <string_view>

#include "attnkit/backends/backend.hpp"
#include "attnkit/dist/communicator.hpp"
#include "attnkit/dist/sharding.hpp"

namespace attnkit::dist {

// ---- layout rules: the same verdict on every rank, without communication ----
// Degrees >= 1 (AK5005) and sp_degree == ring * ulysses when sp is given (AK5001).
Diagnostics check_parallel_degrees(int ring_degree, int ulysses_degree, std::optional<int> sp_degree);
// Ulysses splits the heads: the degree must divide q and kv heads (AK5002).
Diagnostics check_ulysses_heads(int ulysses_degree, int heads, int kv_heads, std::string_view layer);
// The communicator spans exactly sp_degree ranks (AK5007).
Diagnostics check_world_size(const SequenceParallel& sp, int world_size);
// Everything above plus what the problem must be for sequence parallelism (AK5008).
Diagnostics check_sequence_parallel(const Problem& global, const SequenceParallel& sp, int world_size);

// Tensor parallelism of an LLM's attention, as SGLang lays it out (the engine
// flags --tp-size, --dp-size, --enable-dp-attention). The attention TP size is
// tp_size, or tp_size / dp_size under DP attention (dp_size must divide it:
// AK5014); sizes below 1 are AK5005.
Result<int> attention_tp_size(int tp_size, int dp_size, bool dp_attention);
// One rank's heads: heads / tp q heads, and kv_heads / tp kv heads, or one
// replicated kv head when tp exceeds kv_heads. AK5013 (naming the sizes that
// work) when tp does not divide the q heads, or neither divides nor is a
// multiple of the kv heads.
struct RankHeads {
  int heads = 1, kv_heads = 1;
};
Result<RankHeads> tensor_parallel_heads(int tp, int heads, int kv_heads, std::string_view layer);

struct SequenceParallelStats {
  int hops = 0;           // ring hops run (1 without ring)
  int calls = 0;          // inner attention calls made
  int skipped_calls = 0;  // calls skipped: an empty segment (all padding) or no visible key
  // Host time blocked in transfers: on the CPU the communication the compute
  // did not hide (ring waits, Ulysses all-to-alls); on GPUs only queueing.
  double blocked_ms = 0.0;
  // Host time in the inner backend's runs (CPU: the attention itself; GPUs: launches).
  double inner_ms = 0.0;
};

// run(t): `t` holds this rank's shard, shaped as Sharding::local_problem(rank):
// q/k/v/out carry the replicated text (if any) then the rank's tokens of every
// sequence. THD: cu_seqlens_q/k give the global lengths (host int32, the same on
// every rank) and q/k/v are packed by local_cu_seqlens(). lse and sinks as for
// any call. Every rank calls run() together; a refusal on one rank is AK5009 on
// the others, before any data moves. Buffers live in the workspace
// (workspace_bytes(), on the plan's device); run() queues GPU work on `stream`
// and allocates no device memory (the packed layout rebuilds its host-side
// shard tables, O(batch x ranks), from cu_seqlens on every run). One run at a
// time per plan.
class SequenceParallelPlan : public Plan {
 public:
  using Plan::Plan;
  virtual const SequenceParallel& parallel() const = 0;
  virtual SequenceParallelStats last_run_stats() const = 0;
};

// Plans one call of `global` (the whole problem, as one process would run it)
// over platform.communicator; collective: every rank calls it with the same
// arguments. The checks that need no communication run first, so a bad layout
// is refused identically on every rank; then the inner plans, agreed on.
Result<std::unique_ptr<SequenceParallelPlan>> plan_sequence_parallel(const Problem& global, const SequenceParallel& sp,
                                                                     const Backend& inner, const Platform& platform);

}  // namespace attnkit::dist
