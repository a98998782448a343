#pragma once
// The one case list every backend is checked on against `reference`.
#include <string>
#include <vector>

#include "attnkit/core/host_tensor.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::testing {

struct ParityCase {
  std::string name;  // a valid gtest name fragment: letters, digits, '_'
  Problem problem;
  ProblemDataOptions data;
};

// A batch-2 BSHD problem with one head dim for q, k and v: the shape every
// test starts from before setting masks, layouts and features.
Problem make_test_problem(int sq, int sk, int hq, int hkv, int d, DType dtype, MaskKind mask = MaskKind::none);

// Tile-unfriendly lengths (1, 17, 127, 1000), head dims 32..256, GQA ratios
// 1..8, causal with sq != sk, windows, softcap, sinks + LSE, varlen with an
// empty sequence, BHSD, distinct v head dim, block-sparse, custom and paged.
std::vector<ParityCase> parity_cases();

}  // namespace attnkit::testing
