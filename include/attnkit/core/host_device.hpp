#pragma once
// Lets small pure functions (mask ranges, index math) be shared by host code
// and CUDA kernels without pulling CUDA headers into host-only builds.
#if defined(__CUDACC__)
#define AK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define AK_HOST_DEVICE inline
#endif
