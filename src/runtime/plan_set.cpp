#include "runtime/plan_set.hpp"

#include <functional>

namespace attnkit::runtime::detail {

namespace {

template <class T>
void mix(std::size_t& seed, const T& v) {
  seed ^= std::hash<T>{}(v) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);  // boost::hash_combine
}

}  // namespace

std::size_t ProblemHash::operator()(const Problem& p) const noexcept {
  std::size_t h = 0;
  for (int v : {static_cast<int>(p.layout), p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim_qk,
                p.head_dim_v, static_cast<int>(p.dtype), p.kv_dtype ? static_cast<int>(*p.kv_dtype) : -1,
                p.out_dtype_override ? static_cast<int>(*p.out_dtype_override) : -1, static_cast<int>(p.mask),
                p.window.left, p.window.right, p.block_sparse ? p.block_sparse->block_q : -1,
                p.block_sparse ? p.block_sparse->block_k : -1, p.block_sparse ? p.block_sparse->batch : -1,
                p.block_sparse ? p.block_sparse->heads : -1,
                p.paged_kv ? p.paged_kv->page_size : -1, int{p.has_sinks}, int{p.return_lse},
                p.video ? p.video->frames : -1, p.video ? p.video->height : -1, p.video ? p.video->width : -1})
    mix(h, v);
  for (float v : {p.softcap, p.scale.value_or(-1.0f), p.q_descale, p.k_descale, p.v_descale}) mix(h, v);
  return h;
}

Result<const Plan*> PlanSet::plan(const Problem& p) {
  std::lock_guard lock(mutex_);
  if (auto it = plans_.find(p); it != plans_.end()) return static_cast<const Plan*>(it->second.get());
  auto made = make(p);
  if (!made) return made.diagnostics();
  const Plan* out = made->get();
  plans_.emplace(p, std::move(*made));
  return out;
}

bool PlanSet::has(const Problem& p) const {
  std::lock_guard lock(mutex_);
  return plans_.count(p) > 0;
}

std::vector<Problem> PlanSet::shapes() const {
  std::lock_guard lock(mutex_);
  std::vector<Problem> out;
  for (const auto& [p, plan] : plans_) out.push_back(p);
  return out;
}

std::size_t PlanSet::size() const {
  std::lock_guard lock(mutex_);
  return plans_.size();
}

void PlanSet::adopt(const Problem& p, std::unique_ptr<Plan> plan) {
  std::lock_guard lock(mutex_);
  plans_.emplace(p, std::move(plan));
}

}  // namespace attnkit::runtime::detail
