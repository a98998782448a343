#pragma once
// The parity assertion every backend test ends with: run the exact reference
// (fp64 outputs) on the same inputs and compare out and LSE with gtest.
#include "attnkit/core/host_tensor.hpp"

namespace attnkit::testing {

// `data` holds a backend's outputs; fails the current test (EXPECT) where
// they are unwritten, non-finite, or beyond the dtype's relative L2 bound.
void expect_matches_reference(const HostProblemData& data);

}  // namespace attnkit::testing
