#pragma once
// The cuDNN side of the backend: graphs built through the cuDNN frontend,
// cached per GraphSpec for the whole process, and executed on a caller's
// stream. Implemented by graph_frontend.cpp when the frontend headers were
// found at build time, by graph_none.cpp otherwise (every call refuses).
#include <memory>

#include "attnkit/backends/cudnn.hpp"
#include "backends/cudnn/graph_spec.hpp"

namespace attnkit::cudnn {

// Whether this binary carries graph_frontend.cpp.
bool frontend_compiled();

class Graph;  // a built graph with its execution state (graph_frontend.cpp)

struct BuiltGraph {
  std::shared_ptr<Graph> graph;
  std::int64_t workspace_bytes = 0;  // cuDNN's own workspace for one execution
  double build_ms = 0.0;             // 0 when it came from the cache
  bool loaded = false;               // its plan was read from disk (plan_cache.hpp), not built
  std::string store_failure;         // why the built plan could not be stored on disk (empty: stored, or no store)
};

// Checks a spec with the cuDNN frontend's own validation, without a device
// (the spec names the SM). AK2113 with the frontend's reason when refused;
// AK2110 when cuDNN cannot be loaded.
Diagnostics validate_spec(const GraphSpec& spec);

// The spec's graph from the process cache, or built on the current device
// (validate, heuristics, cuDNN's support check, plan build; the plan read from
// disk instead when an earlier process stored it) and cached. A spec
// cuDNN refuses is cached too, so asking again costs nothing: AK2113.
Result<BuiltGraph> find_or_build(const GraphSpec& spec);

// Enqueues one execution on `stream`. Allocates no device memory; safe to call
// from several threads (executions on one device are serialised on its handle).
Diagnostics execute(Graph& graph, const VariantPack& pack, void* workspace, void* stream);

// Whether work enqueued on `stream` is being captured into a CUDA graph.
Result<bool> stream_capturing(void* stream);

}  // namespace attnkit::cudnn
