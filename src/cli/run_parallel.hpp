#pragma once
// `attnkit run` with --ring-degree / --ulysses-degree, or under mpirun: every
// rank builds the same random problem, runs its shard of it through a
// sequence-parallel plan (MPI on the CPU; NCCL, one rank per GPU, on GPUs),
// and checks its rows against the exact reference; rank 0 reports.
//
//   mpirun -np 4 attnkit run --ring-degree 2 --ulysses-degree 2 --seqlen 4096
#include <string>

#include "attnkit/core/host_tensor.hpp"
#include "attnkit/dist/sharding.hpp"
#include "select/deployment_flags.hpp"

namespace attnkit::cli {

struct ParallelRunOptions {
  select::DeploymentFlags degrees;  // --ring-degree, --ulysses-degree, --sp-degree
  int replicated_tokens = 0;        // joint attention: text tokens on every rank
  std::string backend = "auto";     // the inner backend
  int repeat = 5;
  int check_heads = 4;
  std::string format = "text";
};

// Whether `run` goes through the sequence-parallel path.
bool wants_parallel_run(const ParallelRunOptions& o);
// Returns the exit code, the same on every rank.
int run_parallel(const Problem& global, const ProblemDataOptions& data, const ParallelRunOptions& o);

}  // namespace attnkit::cli
