#pragma once
// attnkit dtypes -> CUDA element types, and scalar conversions in kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "attnkit/core/dtype.hpp"

namespace attnkit::cuda {

template <DType D>
struct CudaElement;
template <>
struct CudaElement<DType::f32> { using type = float; };
template <>
struct CudaElement<DType::f16> { using type = __half; };
template <>
struct CudaElement<DType::bf16> { using type = __nv_bfloat16; };

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return x;
}

}  // namespace attnkit::cuda
