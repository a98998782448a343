// Built without CUDA: there is no device to mirror a problem to.
#include "attnkit/platform/device_problem_data.hpp"

namespace attnkit {
namespace {
Diagnostic no_cuda() { return diagnose("AK6002", {{"reason", "this attnkit was built without CUDA"}}); }
}  // namespace

struct DeviceProblemData::Impl {
  AttentionTensors tensors;
};
DeviceProblemData::DeviceProblemData() : impl_(std::make_unique<Impl>()) {}
DeviceProblemData::~DeviceProblemData() = default;
Result<std::shared_ptr<DeviceProblemData>> DeviceProblemData::upload(const HostProblemData&) { return no_cuda(); }
const AttentionTensors& DeviceProblemData::tensors() const { return impl_->tensors; }
Diagnostics DeviceProblemData::run(const Plan&) { return no_cuda(); }
Result<std::vector<double>> DeviceProblemData::time_runs(const Plan&, int, int) { return no_cuda(); }
Diagnostics DeviceProblemData::download_outputs(HostProblemData&) const { return no_cuda(); }
}  // namespace attnkit
