#pragma once
// fa2's score policies: what enters the raw scores Q K^T of a key tile after
// fa2's mask and before the softmax. A policy has
//   static constexpr bool kModifies;   // false: apply() is never called
//   template <class Traits, class SFrag>
//   static void apply(SFrag& s, const AttnParams& p, int batch, int head, int m0, int key0);
// with s the tile's mma accumulator fragment (rows from m0, keys from key0).
// PlainScores is the kernel's default; sol_attn's pooled keys are
// fa2/sol_pooled.hpp's SolPooledScores.
#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

// The scores as fa2 computes them (AttnParams holds no extra per-key term).
struct PlainScores {
  static constexpr bool kModifies = false;
  template <class Traits, class SFrag>
  static __device__ __forceinline__ void apply(SFrag&, const AttnParams&, int, int, int, int) {}
};

}  // namespace attnkit::cuda
