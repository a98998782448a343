#pragma once
// Arithmetic that rounds the same on the host and on the device: each
// operation rounded on its own (round to nearest even), never fused into a
// multiply-add. On the device the `__*_rn` intrinsics, which nvcc does not
// contract; on the host plain operators (the host build does not contract
// them: no -ffp-contract=fast with FMA in its target). For the selections
// whose host and CUDA paths must decide alike from the same sums (sol_attn's
// routing, video_sparse_attn_h3's cube scores).
#include "attnkit/core/host_device.hpp"

namespace attnkit {

AK_HOST_DEVICE double unfused_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
AK_HOST_DEVICE double unfused_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
AK_HOST_DEVICE double unfused_div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
AK_HOST_DEVICE float unfused_fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace attnkit
