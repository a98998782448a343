#pragma once
// Test backends for the Deployment tests: CPU backends that compute with the
// exact reference and record what reached them (plan() calls per backend and
// shape, runs, and the CallContext of every run).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/backends/registry.hpp"

namespace attnkit::testing {

struct ProbeRun {
  std::string backend;
  CallContext where;
};

struct ProbeLog {
  std::map<std::string, int> plans;  // plan() calls by backend
  std::vector<ProbeRun> runs;
  int plans_of(const std::string& backend) const {
    const auto it = plans.find(backend);
    return it == plans.end() ? 0 : it->second;
  }
};

struct ProbeSpec {
  std::string name;
  bool switchable = true;
  bool skip_softmax = false;
  bool built = true;
  int max_head_dim = 256;
  int max_plan_seqlen = 0;  // > 0: plan() refuses longer key sequences (a plan that fails where check passes)
};

std::unique_ptr<Backend> make_probe_backend(ProbeSpec spec, ProbeLog& log);

// The built-in backends plus the probes, registered first so that a probe
// named "fa" is this machine's flash family (on the CPU, `fa` resolves to a
// backend of that name):
//   probe          switchable per request
//   probe_fixed    not switchable per request
//   probe_d64      head dims up to 64 only
//   probe_short    plans at most 64 keys (its check accepts more)
//   probe_unbuilt  modelled: capabilities but no kernel (AK2111)
//   fa             flash family; implements skip-softmax when `fa_skips`
std::unique_ptr<Registry> make_probe_registry(ProbeLog& log, bool fa_skips = true);

}  // namespace attnkit::testing
