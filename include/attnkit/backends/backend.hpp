#pragma once
// A Backend declares what it supports (Capabilities), checks a Problem on a
// Platform returning coded reasons, and plans runs. A Plan does every check,
// tile choice and workspace sizing up front; Plan::run allocates nothing.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/backends/capabilities.hpp"
#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/problem.hpp"
#include "attnkit/platform/platform.hpp"

namespace attnkit {

// Caller-owned scratch memory on the plan's device; at least workspace_bytes().
using Workspace = std::span<std::byte>;
// A cudaStream_t for CUDA plans (nullptr: the default stream); ignored on CPU.
using StreamHandle = void*;

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
};

}  // namespace attnkit
