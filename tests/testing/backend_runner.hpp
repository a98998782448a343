#pragma once
// Runs a backend on host problem data, on whichever platform it targets
// (CPU backends directly; CUDA backends through device copies when a GPU and a
// CUDA build are present).
#include <optional>
#include <string>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit::testing {

// The platform to test `backend` on from this machine, or why there is none
// (e.g. "no CUDA device: GPU parity runs on the device machine").
struct TestPlatform {
  std::optional<Platform> platform;
  std::string skip_reason;
};
TestPlatform test_platform_for(const Backend& backend);

// plan + run; writes the backend's outputs into data's (poisoned) outputs.
Diagnostics run_backend(const Backend& backend, const Platform& platform, HostProblemData& data);

}  // namespace attnkit::testing
