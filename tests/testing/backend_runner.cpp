#include "testing/backend_runner.hpp"

#include <cstdlib>
#include <string_view>
#include <vector>

namespace attnkit::testing {

#if defined(ATTNKIT_HAS_CUDA)
// backend_runner_cuda.cu: copies inputs to the GPU, runs, copies outputs back.
Diagnostics run_backend_cuda(const Plan& plan, HostProblemData& data);
#endif

namespace {
// $ATTNKIT_TEST_SKIP_BACKENDS (comma-separated names): backends the tests treat
// as absent. gpu_check.sh sets it to cudnn under racecheck / synccheck, whose
// reports on cuDNN's own closed kernels are not ours to act on (racecheck flags
// its wgmma kernel, synccheck overflows its barrier tracking); memcheck keeps cudnn.
bool skipped_by_environment(std::string_view name) {
  const char* list = std::getenv("ATTNKIT_TEST_SKIP_BACKENDS");
  if (list == nullptr) return false;
  std::string_view rest(list);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    if (rest.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}
}  // namespace

TestPlatform test_platform_for(const Backend& backend) {
  if (skipped_by_environment(backend.name())) return {std::nullopt, "skipped by $ATTNKIT_TEST_SKIP_BACKENDS"};
  const Capabilities& caps = backend.capabilities();
  if (caps.platforms.contains(PlatformKind::cpu)) return {detect_cpu_platform(), ""};
  if (caps.platforms.contains(PlatformKind::cuda)) {
    if (!caps.built) return {std::nullopt, "not built in this binary"};
    if (auto cuda = detect_cuda_platform()) return {*cuda, ""};
    return {std::nullopt, "no CUDA device on this machine (GPU parity runs on the device machine)"};
  }
  return {std::nullopt, "modelled platform only"};
}

Diagnostics run_backend(const Backend& backend, const Platform& platform, HostProblemData& data) {
  auto plan = backend.plan(data.problem(), platform);
  if (!plan) return plan.diagnostics();
  if (platform.kind == PlatformKind::cuda) {
#if defined(ATTNKIT_HAS_CUDA)
    return run_backend_cuda(**plan, data);
#else
    return diagnose("AK6002", {{"reason", "this build has no CUDA"}});
#endif
  }
  std::vector<std::byte> workspace((*plan)->workspace_bytes());
  return (*plan)->run(data.tensors(), workspace, nullptr);
}

}  // namespace attnkit::testing
