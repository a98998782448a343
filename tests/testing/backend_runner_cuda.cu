// Runs a CUDA plan on a device mirror of the host problem and copies the
// outputs back into the host's (poisoned) output buffers.
#include "attnkit/platform/device_problem_data.hpp"

namespace attnkit::testing {

Diagnostics run_backend_cuda(const Plan& plan, HostProblemData& data) {
  auto device = DeviceProblemData::upload(data);
  if (!device) return device.diagnostics();
  Diagnostics ran = (*device)->run(plan);
  if (!ran.ok()) return ran;
  return (*device)->download_outputs(data);
}

}  // namespace attnkit::testing
