#pragma once
// The sequence-parallel cases every layout (ring, Ulysses, USP) is checked on,
// on any communicator: each rank computes its shard and compares it with the
// same rows of the single-process reference.
#include <ostream>
#include <string>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/dist/sequence_parallel.hpp"

namespace attnkit::testing {

struct DistCase {
  std::string name;
  Problem problem;
  std::vector<int> lens;  // varlen (thd): q and k lengths of every sequence
  int replicated_tokens = 0;
};
inline void PrintTo(const DistCase& c, std::ostream* os) { *os << c.name; }

// Causal, non-causal, sliding window, varlen (with empty and short sequences),
// GQA, joint attention (replicated text), sinks + LSE, fp32; lengths that split
// unevenly over 2 to 8 parts.
std::vector<DistCase> dist_cases();

// The whole problem's inputs and its exact (fp64) answer, made once.
struct DistReference {
  HostProblemData data;
  HostTensor out, lse;
};
DistReference make_reference(const DistCase& c);

struct RankResult {
  Diagnostics diagnostics;
  ErrorStats out, lse;
  dist::SequenceParallelStats stats;
  double bound = 0.0;
};
// Plans and runs `c` on this rank of platform.communicator and compares the
// rank's rows. Collective: every rank calls it with the same case and layout.
RankResult run_rank(const DistCase& c, const DistReference& ref, const dist::SequenceParallel& sp,
                    const Backend& inner, const Platform& platform);

// The (ring, ulysses) layouts with ring * ulysses = world that `c`'s heads allow.
std::vector<dist::SequenceParallel> layouts_for(const DistCase& c, int world);

}  // namespace attnkit::testing
