// Plans and runs attention through the installed package, checks the result
// against the reference, and prints "consumer ok" on success.
#include <cstdio>
#include <vector>

#include <attnkit/backends/reference.hpp>
#include <attnkit/backends/registry.hpp>
#include <attnkit/core/error_stats.hpp>
#include <attnkit/core/host_tensor.hpp>
#include <attnkit/runtime/deployment.hpp>

int main() {
  using namespace attnkit;
  Problem p;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 33;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim_qk = p.head_dim_v = 64;
  p.dtype = DType::f32;
  p.mask = MaskKind::causal;
  const Platform cpu = detect_cpu_platform();
  const Backend* backend = nullptr;
  for (const Backend* b : default_registry().all())
    if (b->capabilities().auto_selectable && b->check(p, cpu).empty()) {
      backend = b;
      break;
    }
  if (backend == nullptr) backend = default_registry().find("reference");
  auto plan = backend->plan(p, cpu);
  if (!plan) {
    std::printf("%s\n", plan.diagnostics().summary().c_str());
    return 1;
  }
  auto data = HostProblemData::create(p, {42});
  std::vector<std::byte> workspace((*plan)->workspace_bytes());
  const Diagnostics ran = (*plan)->run(data->tensors(), workspace, nullptr);
  if (!ran.ok()) {
    std::printf("%s\n", ran.summary().c_str());
    return 1;
  }
  Problem ref = p;
  ref.out_dtype_override = DType::f64;
  HostTensor expected = data->make_output(DType::f64);
  reference_attention(ref, data->tensors_with_outputs(expected.view(), {}));
  const ErrorStats err = compare_outputs(data->tensors().out, expected.view());
  std::printf("backend %s rel_l2 %.2e\n", std::string(backend->name()).c_str(), err.rel_l2);
  if (!err.clean() || err.rel_l2 > 1e-5) return 1;
  // The same call through a Deployment layer of a shipped profile.
  auto dep = runtime::Deployment::create({.model = "wan", .platform = "cpu", .dtype = "fp32"}, default_registry(),
                                         [](std::string_view) {});
  if (!dep) {
    std::printf("%s\n", dep.diagnostics().summary().c_str());
    return 1;
  }
  auto layer = (*dep)->layer("transformer", "self", 0);
  auto layer_plan = (*layer)->plan(p);
  if (!layer_plan) return 1;
  std::vector<std::byte> layer_ws((*layer_plan)->workspace_bytes());
  data->poison_outputs();  // so an output the layer did not write shows
  const Diagnostics layer_ran = (*layer)->run(p, data->tensors(), layer_ws, nullptr);
  const ErrorStats layer_err = compare_outputs(data->tensors().out, expected.view());
  std::printf("deployment layer %s rel_l2 %.2e\n", std::string((*layer)->backend().name()).c_str(), layer_err.rel_l2);
  if (!layer_ran.ok() || !layer_err.clean() || layer_err.rel_l2 > 1e-5) return 1;
  std::printf("consumer ok\n");
  return 0;
}
