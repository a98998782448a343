// The MiniMax-H3 family's gated backends through a Deployment on the CPU: the
// profiles now plan real backends, and a layer refuses a call without the gate
// the checkpoint provides (AK2118) while base weights run without one.
#include <gtest/gtest.h>

#include "attnkit/core/host_tensor.hpp"
#include "attnkit/runtime/deployment.hpp"
#include "sparse_test_util.hpp"

namespace attnkit::sparse {
namespace {

// The layer's problem, shrunk to an 8 x 8 x 8 grid (512 tokens) so that it runs quickly.
Problem small(const Problem& representative, bool gate) {
  Problem p = representative;
  p.video = VideoGrid{8, 8, 8};
  p.seqlen_q = p.seqlen_k = 512;
  p.has_gate = gate;
  return p;
}

Diagnostics run_layer(runtime::AttentionLayer& layer, const Problem& p) {
  auto data = HostProblemData::create(p, {.seed = 3});
  if (!data) return data.diagnostics();
  auto plan = layer.plan(p);
  if (!plan) return plan.diagnostics();
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  return layer.run(p, data->tensors(), ws, nullptr);
}

std::unique_ptr<runtime::Deployment> deploy(const std::string& model, const std::string& backend) {
  auto dep = runtime::Deployment::create({.model = model, .platform = "cpu", .dtype = "fp32", .attention_backend = backend},
                                         default_registry(), [](std::string_view) {});
  EXPECT_TRUE(dep.ok()) << model << ": " << dep.diagnostics().summary();
  return dep.ok() ? std::move(*dep) : nullptr;
}

TEST(H3Deployment, VideoSparseRunsBaseWeightsWithoutAGate) {
  auto dep = deploy("minimax-h3", "video_sparse_attn_h3");
  ASSERT_NE(dep, nullptr);
  runtime::AttentionLayer& self = **dep->layer("transformer", "self", 0);
  ASSERT_EQ(self.backend().name(), "video_sparse_attn_h3");
  EXPECT_TRUE(run_layer(self, small(self.decision().problem, false)).ok());
  EXPECT_TRUE(run_layer(self, small(self.decision().problem, true)).ok());  // a gate is still accepted
  // Cross-attention falls back to dense (recorded).
  EXPECT_NE(dep->layer("transformer", "cross", 0).value()->backend().name(), "video_sparse_attn_h3");
}

TEST(H3Deployment, FastH3NeedsItsCompressionGates) {
  auto dep = deploy("fast-h3", "video_sparse_attn_h3");
  ASSERT_NE(dep, nullptr);
  runtime::AttentionLayer& self = **dep->layer("transformer", "self", 0);
  const Diagnostics without = run_layer(self, small(self.decision().problem, false));
  EXPECT_TRUE(without.has_code("AK2118")) << without.summary();
  EXPECT_FALSE(self.plan(small(self.decision().problem, false)).ok());
  EXPECT_TRUE(run_layer(self, small(self.decision().problem, true)).ok());
}

TEST(H3Deployment, VdnH3RunsTheHybridByDefaultWithItsGate) {
  auto dep = deploy("vdn-h3", "");
  ASSERT_NE(dep, nullptr);
  runtime::AttentionLayer& self = **dep->layer("transformer", "self", 0);
  ASSERT_EQ(self.backend().name(), "hybrid_window_attn_h3");
  EXPECT_TRUE(run_layer(self, small(self.decision().problem, false)).has_code("AK2118"));
  EXPECT_TRUE(run_layer(self, small(self.decision().problem, true)).ok());
}

}  // namespace
}  // namespace attnkit::sparse
