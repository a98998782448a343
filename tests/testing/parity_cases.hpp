#pragma once
// The one case list every backend is checked on against `reference`.
#include <ostream>
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

// gtest prints parameters of failing cases: name them instead of dumping bytes.
inline void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.name; }

// One backend on one case: the parameter of the value-parameterised suites.
struct BackendCase {
  std::string backend;
  ParityCase c;
};
inline void PrintTo(const BackendCase& p, std::ostream* os) { *os << p.backend << "/" << p.c.name; }

// A batch-2 BSHD problem with one head dim for q, k and v: the shape every
// test starts from before setting masks, layouts and features.
Problem make_test_problem(int sq, int sk, int hq, int hkv, int d, DType dtype, MaskKind mask = MaskKind::none);

// Appends a case whose inputs come from a seed of its own: seed_base plus the
// case's index times a prime, so no two cases of a list draw the same data.
void add_case(std::vector<ParityCase>& list, std::string name, const Problem& p, ProblemDataOptions o = {},
              std::uint64_t seed_base = 1);

// Tile-unfriendly lengths (1, 17, 127, 1000), head dims 32..256, GQA ratios
// 1..8, causal with sq != sk, windows, softcap, sinks + LSE, varlen with an
// empty sequence, BHSD, distinct v head dim, block-sparse lists (shared, per
// head, composed with causal / window, varlen), custom and paged.
std::vector<ParityCase> parity_cases();

}  // namespace attnkit::testing
