#pragma once
// A GPU mirror of HostProblemData: uploads inputs (and poisoned outputs),
// runs and times plans with CUDA events, downloads outputs. Used by the CLI,
// tests and benchmarks; in a build without CUDA every call returns AK6002.
#include <memory>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit {

class DeviceProblemData {
 public:
  static Result<std::shared_ptr<DeviceProblemData>> upload(const HostProblemData& host);
  ~DeviceProblemData();
  DeviceProblemData(const DeviceProblemData&) = delete;
  DeviceProblemData& operator=(const DeviceProblemData&) = delete;

  const AttentionTensors& tensors() const;
  // Runs `plan` once on these buffers (with a workspace it owns) and waits.
  Diagnostics run(const Plan& plan);
  // Milliseconds of each of `repeats` runs after `warmup` untimed runs (CUDA events).
  Result<std::vector<double>> time_runs(const Plan& plan, int warmup, int repeats);
  // Copies out (and lse) back into the host data's output buffers.
  Diagnostics download_outputs(HostProblemData& host) const;

 private:
  DeviceProblemData();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnkit
