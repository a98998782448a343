#pragma once
// sol_attn's pooled pass on fa2's tensor-core mainloop (instances.def family
// fa2solpool; docs/sparse.md section 4). The keys are one pooled key per
// 64-token tile c of the sequence, mean(k_c), with value mean(v_c); a query i
// of block qb sees the pooled key of every tile not kept exactly for qb, with
//   logit = scale * q_i . mean(k_c) + ln(tokens of c),
// so the raw score q.k gets ln(tokens of c) / scale added before fa2 scales it.
// The kernel's 64-query tile is one query block (Fa2Q64Config), so the tile
// reads one row of the kept flags (AttnParams::sol_keep). A score policy of
// fa2/scores.hpp.
#include <cmath>

#include "kernels/cuda/params.hpp"

namespace attnkit::cuda {

struct SolPooledScores {
  static constexpr bool kModifies = true;
  // s[m][nt][2r + c] is the score of row (strip m, g + 8r) and key key0 + 8 nt + 2t + c;
  // keys past the last tile were hidden by fa2's own mask and stay -inf.
  template <class Traits, class SFrag>
  static __device__ __forceinline__ void apply(SFrag& s, const AttnParams& p, int batch, int head, int m0, int key0) {
    const int t = threadIdx.x & 3;
    const std::int64_t row = (static_cast<std::int64_t>(batch) * p.heads_q + head) * p.sol_q_blocks + m0 / Traits::kBlockM;
    const std::uint8_t* keep = p.sol_keep + row * p.seqlen_k;
#pragma unroll
    for (int nt = 0; nt < Traits::kSTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int j = key0 + nt * 8 + 2 * t + c;
        if (j >= p.seqlen_k) continue;
        const bool kept = keep[j] != 0;
        const float bias = j == p.seqlen_k - 1 ? p.sol_bias_last : p.sol_bias_full;
#pragma unroll
        for (int m = 0; m < Traits::kMTiles; ++m)
#pragma unroll
          for (int r = 0; r < 2; ++r) s[m][nt][2 * r + c] = kept ? -INFINITY : s[m][nt][2 * r + c] + bias;
      }
  }
};

}  // namespace attnkit::cuda
