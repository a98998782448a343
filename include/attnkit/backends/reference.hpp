#pragma once
// `reference`: exact attention, the oracle of every test. Every Problem feature,
// any input dtype, fp64 accumulation; memory O(seqlen_k) per row being computed.
#include <memory>
#include <utility>
#include <vector>

#include "attnkit/backends/backend.hpp"

namespace attnkit {

struct ReferenceOptions {
  // (batch, q head) pairs to compute; empty: all. Other outputs are untouched.
  std::vector<std::pair<int, int>> only_heads;
  bool check_finite = true;  // refuse NaN/Inf inputs (AK1109)
};

// Validates the binding (host memory), then computes. Out may be any float type,
// fp64 included, so tests can compare against unrounded values.
Diagnostics reference_attention(const Problem& p, const AttentionTensors& t,
                                const ReferenceOptions& options = {});

std::unique_ptr<Backend> make_reference_backend();

}  // namespace attnkit
