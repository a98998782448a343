#pragma once
// Scalar device helpers shared by the flash kernels of every arch: shared-window
// addresses, fast exp2, two floats packed into one 16-bit pair, reductions
// over the 4 threads of a quad (the threads that hold one row of an mma /
// wgmma accumulator) and over a whole CTA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace attnkit::cuda {

// The 32-bit shared-window address of a shared-memory pointer.
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Two floats -> one 32-bit register of two 16-bit values (lo in the low half).
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
}

// 2^x in one MUFU op (ex2.approx: 2 ulp; exp2(-inf) = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The max (take_max) or sum of v over the whole CTA, on every thread, in a
// fixed order (the same result on every run: the sparse selections must
// decide alike). `red` holds one double per warp; the call's barriers also
// publish the shared memory written before it.
__device__ __forceinline__ double block_reduce(double v, bool take_max, double* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const double w = __shfl_xor_sync(0xffffffffu, v, o);
    v = take_max ? fmax(v, w) : v + w;
  }
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // red is free
  if (threadIdx.x % 32 == 0) red[warp] = v;
  __syncthreads();
  double r = red[0];
  for (int w = 1; w < warps; ++w) r = take_max ? fmax(r, red[w]) : r + red[w];
  return r;
}

}  // namespace attnkit::cuda
