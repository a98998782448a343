#pragma once
// attnkit dtypes -> CUDA element types, and scalar conversions in kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
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

// Element i of a buffer whose dtype (f32 / f16 / bf16) is known only at run
// time, as float; and stored from float, rounded to nearest.
__device__ __forceinline__ float load_float(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::f16: return to_float(static_cast<const __half*>(p)[i]);
    case DType::bf16: return to_float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_float(void* p, DType t, std::int64_t i, float x) {
  switch (t) {
    case DType::f16: static_cast<__half*>(p)[i] = from_float<__half>(x); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = from_float<__nv_bfloat16>(x); break;
    default: static_cast<float*>(p)[i] = x;
  }
}

}  // namespace attnkit::cuda
