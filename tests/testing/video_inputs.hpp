#pragma once
// Inputs with the structure of a video DiT's attention, for the accuracy
// tests of the sparse backends (iid noise has no locality and no outliers,
// so it says little about them):
//   q, k: random Fourier features of the token's (t, y, x) position, so that
//         q(a) . k(b) ~ exp(-|a - b|^2 / (2 l^2)) (attention concentrates near
//         the query, l per head), plus smooth content channels (low-frequency
//         fields over the grid), noise, and a few outlier channels (large
//         near-constant values, as real q / k have);
//   v:    a smooth field plus noise.
// Text tokens after the grid are standard normal.
#include <cstdint>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::testing {

struct VideoLikeOptions {
  std::uint64_t seed = 1;
  double locality = 2.5;      // the length scale l, in tokens (heads vary it by up to 2x)
  double sharpness = 8.0;     // logit spread of the positional part (peak minus far tokens)
  int outlier_channels = 2;   // channels with large near-constant values
  double noise = 0.1;
};

// Overwrites q, k, v of `t` (host, any layout `p` allows except paged) for
// p.video's grid (required).
void fill_video_like(const Problem& p, const AttentionTensors& t, const VideoLikeOptions& o = {});

}  // namespace attnkit::testing
