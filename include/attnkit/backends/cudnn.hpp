#pragma once
// The cudnn backend: cuDNN 9's fused SDPA forward through the cuDNN frontend's
// graph API. libcudnn.so.9 is opened at run time, so a binary with this
// backend runs on machines without cuDNN and refuses with a reason. plan()
// builds (or finds, in a process-wide cache keyed by shape and strides) the
// cuDNN graph and sizes the workspace; run() only enqueues it, capturable in a
// CUDA graph.
//
// Features: fp16/bf16 (fp8 e4m3/e5m2 with fp16/bf16 output on Blackwell),
// causal and sliding windows aligned bottom-right, GQA/MQA, packed varlen
// (THD), paged KV caches, sinks, LSE out. Not: softcap, block-sparse or custom
// masks, fp32. What a given cuDNN release and SM refuses is a reason (AK2113).
#include <cstdint>
#include <memory>

#include "attnkit/backends/registry.hpp"

namespace attnkit {

std::unique_ptr<Backend> make_cudnn_backend();

// Counters of this process's cuDNN graph cache, for tests and benchmarks.
struct CudnnGraphStats {
  std::int64_t built = 0;       // graphs built (validate, heuristics, support check, plan build)
  std::int64_t loaded = 0;      // graphs whose plan was read from disk ($ATTNKIT_CUDNN_PLAN_CACHE)
  std::int64_t refused = 0;     // graphs cuDNN refused (cached as refusals)
  std::int64_t cache_hits = 0;  // lookups answered from the cache
  std::int64_t store_failures = 0;  // built plans that could not be stored on disk (the first one is said on stderr)
  double last_build_ms = 0.0;   // wall time of the latest build (or load)
  double max_build_ms = 0.0;
  double total_build_ms = 0.0;
};
CudnnGraphStats cudnn_graph_stats();

}  // namespace attnkit
