#pragma once
// A Backend declares what it supports (Capabilities), checks a Problem on a
// Platform returning coded reasons, and plans runs. A Plan does every check,
// tile choice and workspace sizing up front; Plan::run allocates nothing.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/backends/capabilities.hpp"
#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/problem.hpp"
#include "attnkit/platform/platform.hpp"
#include "attnkit/select/config.hpp"

namespace attnkit {

// Caller-owned scratch memory on the plan's device; at least workspace_bytes().
using Workspace = std::span<std::byte>;
// A cudaStream_t for CUDA plans (nullptr: the default stream); ignored on CPU.
using StreamHandle = void*;

// Request-scoped skip-softmax (design 2.2 and 3; exact rule in docs/sparse.md):
// from denoising step `start_step` on, a query row skips a key block (its
// exponentials, its P.V, its V load) when the block's largest logit is below
// the row's running maximum by more than -ln(threshold), threshold =
// threshold_scale_factor / (keys of the sequence). Blocks are aligned runs of
// `block_k` keys from key 0: kernels given the same block_k agree.
struct SkipSoftmaxParams {
  double threshold_scale_factor = 0.0;
  std::int64_t start_step = 0;
  int block_k = 128;  // the decision's key granularity (the sm_90 kernel's tile)
};

// What a sparse or skipping backend left out of a call, for CallContext::stats.
// Units are the method's: (query block, key block) pairs for block-sparse
// backends, (query row, key block) pairs for skip-softmax.
struct SparsityStats {
  std::int64_t blocks = 0;          // pairs the method decided on
  std::int64_t blocks_skipped = 0;  // of which it skipped
  bool dense = false;               // the call ran the dense kernel (a dense step or layer, a fallback)
  std::string dense_reason;         // why, when `dense`
  double skipped_fraction() const { return blocks > 0 ? static_cast<double>(blocks_skipped) / blocks : 0.0; }
};

// Where a call runs inside a model: what step- and layer-dependent backends
// read (sol_attn's dense_steps / dense_layers, skip-softmax's start_step).
struct CallContext {
  std::int64_t step = -1;         // the request's denoising step; -1: none given
  std::int64_t layer_index = -1;  // the layer's index in its component and role; -1: a one-off call
  std::optional<SkipSoftmaxParams> skip_softmax;  // set while a request asks for it
  SparsityStats* stats = nullptr;  // non-null: the backend adds what it skipped (not thread-safe across calls)
};

class Plan {
 public:
  explicit Plan(Problem p) : problem_(std::move(p)) {}
  virtual ~Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const Problem& problem() const { return problem_; }
  virtual std::size_t workspace_bytes() const { return 0; }
  // Validates the binding against the planned Problem, then computes. Allocates
  // nothing; on CUDA it only enqueues work on `stream`.
  virtual Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const = 0;
  // run() for a layer of a deployment (runtime/deployment.hpp). Backends whose
  // math depends on the step, the layer or the request override this; the
  // others compute the same whatever `where` says.
  virtual Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws,
                             StreamHandle stream) const {
    (void)where;
    return run(t, ws, stream);
  }

 private:
  Problem problem_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual const Capabilities& capabilities() const = 0;
  // Why this backend cannot run `p` on `platform` (empty: it can). The default
  // checks the declared capabilities; backends add their own rules on top.
  virtual Diagnostics check(const Problem& p, const Platform& platform) const;
  // check() plus tile/workspace decisions. Fails with the same diagnostics.
  virtual Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const = 0;
  // plan() under a deployment's --attention-backend-config (design 3), whose
  // keys the selection has validated against the selected backends' schemas;
  // a backend reads its own keys. Backends without configuration ignore it.
  virtual Result<std::unique_ptr<Plan>> plan_configured(const Problem& p, const Platform& platform,
                                                        const select::BackendConfig& config) const {
    (void)config;
    return plan(p, platform);
  }
  // check() under a deployment's config: also what plan_configured() would
  // refuse for this config (a sparse backend's tile geometry or mask strategy),
  // found without planning, allocating or touching a GPU, so that `check`
  // fails a deployment at start-up that its plans would fail later. check()
  // comes first: when it refuses, its reasons alone (the selection calls one
  // or the other, not both). The selection has validated the config's keys;
  // a required key may be missing.
  virtual Diagnostics check_configured(const Problem& p, const Platform& platform,
                                       const select::BackendConfig& config) const {
    (void)config;
    return check(p, platform);
  }
};

}  // namespace attnkit
