#include "testing/dist_cases.hpp"

#include "attnkit/backends/reference.hpp"
#include "dist/device_ops.hpp"
#include "testing/parity_cases.hpp"

namespace attnkit::testing {

std::vector<DistCase> dist_cases() {
  std::vector<DistCase> cases;
  auto dense = [](int s, int hq, int hkv, int d, DType t, MaskKind m) { return make_test_problem(s, s, hq, hkv, d, t, m); };
  cases.push_back({"causal", dense(131, 4, 4, 32, DType::bf16, MaskKind::causal)});
  cases.push_back({"noncausal", dense(97, 4, 4, 32, DType::bf16, MaskKind::none)});
  {
    Problem p = dense(128, 4, 4, 32, DType::bf16, MaskKind::sliding_window);
    p.window = {19, 6};  // narrower than a ring chunk at 4 ranks: some hops see nothing
    cases.push_back({"window", p});
  }
  {
    Problem p = dense(120, 4, 4, 32, DType::bf16, MaskKind::sliding_window);
    p.window = {40, 0};  // causal-like band
    cases.push_back({"window_left_only", p});
  }
  cases.push_back({"gqa_causal", dense(100, 8, 4, 32, DType::bf16, MaskKind::causal)});
  for (MaskKind m : {MaskKind::causal, MaskKind::none, MaskKind::sliding_window}) {
    Problem p = dense(90, 4, 4, 32, DType::bf16, m);
    p.layout = Layout::thd;
    p.batch = 4;
    p.window = {23, 5};
    cases.push_back({std::string("varlen_") + std::string(mask_kind_name(m)), p, {37, 0, 90, 5}});
  }
  {
    Problem p = dense(7 + 90, 4, 4, 32, DType::bf16, MaskKind::none);
    cases.push_back({"joint_text", p, {}, 7});
  }
  {
    Problem p = dense(7 + 64, 4, 4, 32, DType::bf16, MaskKind::none);
    p.layout = Layout::bhsd;
    p.return_lse = true;
    cases.push_back({"joint_text_bhsd_lse", p, {}, 7});
  }
  {
    Problem p = dense(77, 4, 2, 32, DType::f32, MaskKind::causal);
    p.has_sinks = p.return_lse = true;
    p.softcap = 20.0f;
    cases.push_back({"fp32_sinks_lse_softcap", p});
  }
  return cases;
}

DistReference make_reference(const DistCase& c) {
  ProblemDataOptions o;
  o.seed = std::hash<std::string>{}(c.name) % 100003;
  o.q_lens = o.k_lens = c.lens;
  auto data = HostProblemData::create(c.problem, o);
  if (!data) throw std::runtime_error(data.diagnostics().summary());
  DistReference r{std::move(*data), {}, {}};
  Problem exact = c.problem;
  exact.out_dtype_override = DType::f64;
  r.out = r.data.make_output(DType::f64);
  if (c.problem.return_lse) r.lse = r.data.make_lse();
  const Diagnostics ran = reference_attention(exact, r.data.tensors_with_outputs(r.out.view(), r.lse.view()));
  if (!ran.ok()) throw std::runtime_error(ran.summary());
  return r;
}

RankResult run_rank(const DistCase& c, const DistReference& ref, const dist::SequenceParallel& sp, const Backend& inner,
                    const Platform& platform) {
  RankResult result;
  const int rank = platform.communicator->rank();
  const Problem& p = c.problem;
  const dist::Sharding sharding(p, sp, ref.data.q_lens(), ref.data.k_lens());
  dist::HostShard shard = dist::make_host_shard(ref.data, sharding, rank);
  auto plan = dist::plan_sequence_parallel(p, sp, inner, platform);
  if (!plan) {
    result.diagnostics = plan.diagnostics();
    return result;
  }
  // On a GPU plan: device copies of the shard, and the outputs fetched back.
  const Device device{platform.kind == PlatformKind::cuda ? DeviceKind::cuda : DeviceKind::cpu, platform.device_index};
  auto ops = dist::ops_for(device.kind);
  if (!ops) return {ops.diagnostics()};
  dist::DeviceCopies copies(**ops, device);
  AttentionTensors t = shard.tensors;
  result.diagnostics = copies.place_all(t);
  auto ws = copies.scratch((*plan)->workspace_bytes());
  if (!ws) result.diagnostics.append(ws.diagnostics());
  if (!result.diagnostics.ok()) return result;
  result.diagnostics = (*plan)->run(t, {static_cast<std::byte*>(*ws), (*plan)->workspace_bytes()}, nullptr);
  if (result.diagnostics.ok()) result.diagnostics = (*ops)->synchronize(nullptr);
  result.stats = (*plan)->last_run_stats();
  if (!result.diagnostics.ok()) return result;
  result.diagnostics = copies.fetch(t.out, shard.out.view());
  result.diagnostics.append(copies.fetch(t.lse, shard.lse.view()));
  if (!result.diagnostics.ok()) return result;
  const HostTensor want = dist::shard_tokens(ref.out.view(), p.layout, sharding, rank, false);
  result.out = compare_outputs(shard.out.view(), want.view());
  if (p.return_lse) {
    const HostTensor want_lse = dist::shard_lse(ref.lse.view(), p.layout, sharding, rank);
    result.lse = compare_outputs(shard.lse.view(), want_lse.view());
  }
  result.bound = rel_l2_bound(p);
  return result;
}

std::vector<dist::SequenceParallel> layouts_for(const DistCase& c, int world) {
  std::vector<dist::SequenceParallel> out;
  for (int u = 1; u <= world; ++u)
    if (world % u == 0 && c.problem.heads_q % u == 0 && c.problem.heads_kv % u == 0)
      out.push_back({world / u, u, c.replicated_tokens});
  return out;
}

}  // namespace attnkit::testing
