// A build without CUDA: no device ops (ops_for(cuda) says AK6002).
#include "dist/device_ops.hpp"

namespace attnkit::dist {
const DeviceOps* cuda_ops() { return nullptr; }
}  // namespace attnkit::dist
