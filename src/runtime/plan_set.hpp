#pragma once
// The plan cache behind AttentionLayer: one Decision and the Plans its backend
// made, one per problem shape, shared by every layer of one component and role
// (a plan depends on the shape, not on the layer; the layer index reaches the
// backend at run time).
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/select/selector.hpp"

namespace attnkit::runtime::detail {

// Combines every field of a Problem; equality is Problem's operator==, so a
// field missing here costs a collision, never a wrong plan.
struct ProblemHash {
  std::size_t operator()(const Problem& p) const noexcept;
};

class PlanSet {
 public:
  // `config`: the deployment's --attention-backend-config, outliving the set.
  PlanSet(select::Decision decision, const Backend& backend, const Platform& platform,
          const select::BackendConfig& config)
      : decision_(std::move(decision)), backend_(&backend), platform_(&platform), config_(&config) {}

  const select::Decision& decision() const { return decision_; }
  const Backend& backend() const { return *backend_; }

  // The cached plan of `p`, planned on the first call.
  Result<const Plan*> plan(const Problem& p);
  bool has(const Problem& p) const;
  std::vector<Problem> shapes() const;
  std::size_t size() const;

  // Plans `p` without caching (a request's staging); adopt() caches it once
  // every plan of the request succeeded.
  Result<std::unique_ptr<Plan>> make(const Problem& p) const {
    return backend_->plan_configured(p, *platform_, *config_);
  }
  void adopt(const Problem& p, std::unique_ptr<Plan> plan);

 private:
  select::Decision decision_;
  const Backend* backend_;
  const Platform* platform_;
  const select::BackendConfig* config_;
  mutable std::mutex mutex_;
  std::unordered_map<Problem, std::unique_ptr<Plan>, ProblemHash> plans_;
};

// The plan sets of one (component, role): [0] the deployment's own decision,
// [slot] a prepared override's; missing or null where a request leaves the
// role alone (a component that is not switchable).
struct RoleSets {
  bool switchable = false;
  std::vector<std::unique_ptr<PlanSet>> by_slot;

  PlanSet& for_slot(std::size_t slot) const {
    return slot < by_slot.size() && by_slot[slot] ? *by_slot[slot] : *by_slot[0];
  }
};

}  // namespace attnkit::runtime::detail
