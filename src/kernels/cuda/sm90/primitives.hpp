#pragma once
// The sm_90a building blocks of the Hopper flash kernel, one PTX instruction
// each: mbarriers, TMA tile loads, wgmma (descriptors, fences, groups),
// register reallocation and named barriers. Everything here needs
// -gencode=arch=compute_90a,code=sm_90a; callers compile it only under
// AK_SM90_ENABLED.
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/sm90/smem_layout.hpp"
#include "kernels/cuda/sm90/wgmma_ops.hpp"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AK_SM90_ENABLED 1
#endif

namespace attnkit::cuda::sm90 {

// ---- mbarriers (64-bit, in shared memory, addressed by 32-bit shared-window addresses)
//
// A barrier completes a phase when `count` arrivals have happened and every
// byte announced with expect_tx has landed; waiters name the phase by parity.
// A fresh barrier counts as having completed the phase before phase 0, so a
// producer waiting on "empty" with parity 1 passes at once.
__device__ __forceinline__ void mbar_init(std::uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` of TMA traffic for this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Plain 32-bit shared-memory words beside the barriers. mbarrier.arrive has
// release and try_wait acquire semantics (CTA scope), so a word stored before
// an arrive is seen by the threads that waited for that phase.
__device__ __forceinline__ void st_shared_u32(std::uint32_t addr, int value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ std::uint32_t ld_shared_u32(std::uint32_t addr) {
  std::uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// ---- TMA (the bulk tensor copy engine)

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}
// One box of a 4-D tensor map into shared memory at `smem`, completing on `bar`.
// Coordinates are element indices, innermost first; rows past the tensor's
// extent are zero-filled (and still count toward the barrier's bytes).
__device__ __forceinline__ void tma_load_4d(std::uint32_t smem, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// The same for a 5-D map (raster_tokens.hpp: a box of video tokens).
__device__ __forceinline__ void tma_load_5d(std::uint32_t smem, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], "
      "[%2];\n" ::"r"(smem),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// One box of a 4-D tensor map from shared memory at `smem` to global memory,
// in this thread's current bulk group. Rows past the tensor's extent are not
// written. The shared memory may be rewritten once tma_store_wait_read()
// returns in the issuing thread.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, std::uint32_t smem, int c0, int c1, int c2,
                                             int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(smem), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's committed stores have read their shared memory.
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Until this thread's committed stores are complete (before the CTA exits).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// ---- stmatrix

// Four 8 x 8 matrices of 16-bit elements from the warp's registers to shared
// memory: register i of lane l holds row l / 4, columns 2 (l % 4) and + 1 of
// matrix i (the mma accumulator layout, packed); lane l gives the address of
// row l % 8 of matrix l / 8.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t addr, std::uint32_t r0, std::uint32_t r1, std::uint32_t r2,
                                            std::uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// ---- wgmma

// Descriptors: smem_layout.hpp (host-callable, CPU-tested).

// Orders this thread's register writes before the wgmmas that read them
// (accumulators, register A operands).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// wgmma_wait<0>() once `x` is computed. ptxas hoists a wait_group to the top
// of its block, so the fa3 key loop waited for P V(n-1) before softmax(n) had
// begun (SASS, ptxas 13.0: all 64 exponentials of d128 after the wait) and the
// two did not overlap. A branch on a warp vote over a value the softmax
// computes keeps the wait below it; `x` is a row sum of exponentials, never
// negative (NaN included: !(x < 0)), so the first wait always runs and every
// warp of the warpgroup takes the same branch, as wait_group requires. The
// second copy differs in its text so that the compiler cannot merge the two.
__device__ __forceinline__ void wgmma_wait_all_after(float x) {
  if (__all_sync(0xffffffffu, !(x < 0.0f)))
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  else
    asm volatile("wgmma.wait_group.sync.aligned 0; // unreachable: x >= 0 or NaN\n" ::: "memory");
}

// x, with its bits hidden from the compiler's known-bits analysis (no code):
// the compiler can then neither rebuild it from its parts nor fold masks into
// its uses, and keeps it in a register.
__device__ __forceinline__ std::uint64_t opaque(std::uint64_t x) {
  asm("" : "+l"(x));
  return x;
}
__device__ __forceinline__ std::uint32_t opaque(std::uint32_t x) {
  asm("" : "+r"(x));
  return x;
}

// The compiler sees a wgmma's accumulators as written when the asm statement
// issues, not when wait_group returns: pinning them here, after the wait,
// keeps every later read of them after it (CUTLASS's warpgroup_fence_operand).
template <int R, int C>
__device__ __forceinline__ void fence_registers(float (&r)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < C; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
}
template <int R, int C>
__device__ __forceinline__ void fence_registers(std::uint32_t (&r)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < C; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

#define AK_WGMMA_CASE_SS(N)                                              \
  if constexpr (kN == N) {                                               \
    if constexpr (std::is_same_v<T, __half>) AK_WGMMA_SS_N##N("f16", "0"); \
    else AK_WGMMA_SS_N##N("bf16", "0");                                   \
  }
#define AK_WGMMA_CASE_RS(N)                                              \
  if constexpr (kN == N) {                                               \
    if constexpr (std::is_same_v<T, __half>) AK_WGMMA_RS_N##N("f16", "1"); \
    else AK_WGMMA_RS_N##N("bf16", "1");                                   \
  }

// D[64 x kN] (+)= A[64 x 16] B[16 x kN], A and B K-major in shared memory.
template <class T, int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 8][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                         int scale_d) {
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= 256, "wgmma_ops.hpp has N = 16, 32, ..., 256");
#if defined(AK_SM90_ENABLED)
  AK_WGMMA_CASE_SS(16) AK_WGMMA_CASE_SS(32) AK_WGMMA_CASE_SS(48) AK_WGMMA_CASE_SS(64) AK_WGMMA_CASE_SS(80)
  AK_WGMMA_CASE_SS(96) AK_WGMMA_CASE_SS(112) AK_WGMMA_CASE_SS(128) AK_WGMMA_CASE_SS(144) AK_WGMMA_CASE_SS(160)
  AK_WGMMA_CASE_SS(176) AK_WGMMA_CASE_SS(192) AK_WGMMA_CASE_SS(208) AK_WGMMA_CASE_SS(224) AK_WGMMA_CASE_SS(240)
  AK_WGMMA_CASE_SS(256)
#else
  (void)d, (void)desc_a, (void)desc_b, (void)scale_d;
#endif
}

// D[64 x kN] (+)= A[64 x 16] B[16 x kN], A from registers (m16n8k16 A fragments,
// one per warp), B MN-major in shared memory.
template <class T, int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 8][4], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                         int scale_d) {
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= 256, "wgmma_ops.hpp has N = 16, 32, ..., 256");
#if defined(AK_SM90_ENABLED)
  AK_WGMMA_CASE_RS(16) AK_WGMMA_CASE_RS(32) AK_WGMMA_CASE_RS(48) AK_WGMMA_CASE_RS(64) AK_WGMMA_CASE_RS(80)
  AK_WGMMA_CASE_RS(96) AK_WGMMA_CASE_RS(112) AK_WGMMA_CASE_RS(128) AK_WGMMA_CASE_RS(144) AK_WGMMA_CASE_RS(160)
  AK_WGMMA_CASE_RS(176) AK_WGMMA_CASE_RS(192) AK_WGMMA_CASE_RS(208) AK_WGMMA_CASE_RS(224) AK_WGMMA_CASE_RS(240)
  AK_WGMMA_CASE_RS(256)
#else
  (void)d, (void)a, (void)desc_b, (void)scale_d;
#endif
}
#undef AK_WGMMA_CASE_SS
#undef AK_WGMMA_CASE_RS

// ---- warp specialisation

// Moves registers from the producer warpgroup to the consumers (the kernel
// needs a register cap at entry: __launch_bounds__(threads, CTAs per SM)).
template <int kRegs>
__device__ __forceinline__ void regs_release() {
#if defined(AK_SM90_ENABLED)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void regs_claim() {
#if defined(AK_SM90_ENABLED)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Named barriers (ids 1..15; 0 is __syncthreads): `threads` threads, a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Whether `pred` holds on any of the `threads` threads that meet at named
// barrier `id` (bar.red.or: a barrier that also reduces a predicate).
__device__ __forceinline__ bool named_barrier_any(int id, int threads, bool pred) {
  std::uint32_t out;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "bar.red.or.pred q, %2, %3, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(out)
      : "r"(static_cast<std::uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return out != 0;
}

// Makes ordinary shared-memory writes visible to the async proxy (TMA stores, wgmma reads).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ bool elect_one_lane() {
  std::uint32_t pred = 0;
#if defined(AK_SM90_ENABLED)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(pred));
#endif
  return pred != 0;
}

}  // namespace attnkit::cuda::sm90
