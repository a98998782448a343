#pragma once
// What the sparse video backends share: their capability model (dense
// problems in, no LSE, no ring), their checks, and the split of planning into
// the config check and a per-platform path.
#include <string>

#include "attnkit/backends/backend.hpp"

namespace attnkit::sparse {

// The binding of a gated backend's call (validate_binding), then its gate's
// values (AK1109: q, k, v are scanned by the kernels underneath).
Diagnostics validate_gated_call(const Problem& p, const AttentionTensors& t);

// `plan`, or AK1013 when its workspace (host memory the caller allocates on
// the CPU path) cannot fit in this machine's available memory.
Result<std::unique_ptr<Plan>> with_host_workspace(std::unique_ptr<Plan> plan, std::string_view backend);

// Self-attention over BSHD / BHSD video tokens, no mask, no softcap / sinks /
// LSE (so no ring attention), head dims `dims`; CPU (fp32 / fp16 / bf16) and
// CUDA sm_80+ (fp16 / bf16).
Capabilities sparse_video_capabilities(std::vector<int> dims);

class SparseVideoBackend : public Backend {
 public:
  SparseVideoBackend(std::string name, std::string description, Capabilities caps)
      : name_(std::move(name)), description_(std::move(description)), caps_(std::move(caps)) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  const Capabilities& capabilities() const override { return caps_; }

  // The capabilities, fp32 refused on CUDA, and AK2111 on a GPU of this
  // machine for a backend without a CUDA path (has_cuda_path()).
  Diagnostics check(const Problem& p, const Platform& platform) const override;
  // check(), then call_refusals() when the config's values are valid.
  Diagnostics check_configured(const Problem& p, const Platform& platform,
                               const select::BackendConfig& config) const override;
  // Without a deployment's config: its required keys are missing (AK3104).
  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override;
  Result<std::unique_ptr<Plan>> plan_configured(const Problem& p, const Platform& platform,
                                                const select::BackendConfig& config) const override;

 protected:
  // What this backend refuses for this call under `config` beyond its
  // capabilities (its geometry, its files), found without planning: plan and
  // check both ask it, so they agree. `config`'s values are valid; a required
  // key may be missing.
  virtual Diagnostics call_refusals(const Problem& p, const Platform& platform,
                                    const select::BackendConfig& config) const {
    (void)p, (void)platform, (void)config;
    return {};
  }
  // The CPU path, after the problem, the platform, the backend's own config
  // keys and call_refusals() passed their checks.
  virtual Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                                 const select::BackendConfig& config) const = 0;
  // The CUDA path (cuda_sparse_runner.hpp), where the backend has one.
  virtual bool has_cuda_path() const { return false; }
  virtual Result<std::unique_ptr<Plan>> plan_cuda(const Problem& p, const Platform& gpu,
                                                  const select::BackendConfig& config) const;

 private:
  std::string name_, description_;
  Capabilities caps_;
};

}  // namespace attnkit::sparse
