// cuDNN SDPA forward graphs through the cuDNN frontend (header-only; its
// version is pinned by scripts/install_deps.sh). The frontend runs in its
// dynamic-loading mode: every cuDNN call goes through the libcudnn.so.9 handle
// that cudnn_library() opened, so nothing here links against cuDNN. Every
// frontend error and exception becomes a catalogued diagnostic.
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backends/cudnn/graph.hpp"
#include "backends/cudnn/plan_cache.hpp"
#include "platform/cudnn_library.hpp"

// The frontend's dynamic loading resolves cuDNN symbols through this handle.
// This file is compiled with hidden visibility: neither this variable nor the
// frontend's inline functions can be interposed by another copy of the
// frontend in the process (PyTorch links one).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace attnkit::cudnn {
namespace fe = cudnn_frontend;

namespace {

Diagnostics bind_library() {
  static const Diagnostics bound = [] {
    const auto& lib = cudnn_library();
    if (!lib) return lib.diagnostics();
    fe::cudnn_dlhandle = lib.value().handle;
    return Diagnostics{};
  }();
  return bound;
}

Diagnostic call_failed(const std::string& call, const std::string& error) {
  return diagnose("AK6003", {{"call", call}, {"error", error}});
}

Diagnostic refused(const GraphSpec& s, const std::string& stage, fe::error_t status) {
  return diagnose(
      "AK2113", {{"version", fe::detail::get_backend_version_string()},
                 {"platform", "sm_" + std::to_string(s.sm)},
                 {"reason", "cuDNN's " + stage + " refused the graph (" + s.summary() + "): " + status.get_message()}});
}

fe::DataType_t fe_type(DType t) {
  switch (t) {
    case DType::f16: return fe::DataType_t::HALF;
    case DType::bf16: return fe::DataType_t::BFLOAT16;
    case DType::f8e4m3: return fe::DataType_t::FP8_E4M3;
    case DType::f8e5m2: return fe::DataType_t::FP8_E5M2;
    default: return fe::DataType_t::FLOAT;
  }
}

std::vector<std::int64_t> vec(const std::array<std::int64_t, 4>& a) { return {a.begin(), a.end()}; }

// One cuDNN handle per device, with the lock that serialises its use (a
// handle's stream and its executions are not thread-safe).
struct DeviceContext {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
};

Result<DeviceContext*> device_context(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceContext>> contexts;  // never destroyed: outlives every plan
  std::lock_guard lock(mutex);
  auto& ctx = contexts[device];
  if (ctx) return ctx.get();
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) {
    cudaGetLastError();
    return call_failed("cudnnCreate", "the current CUDA device (" + std::to_string(current) +
                                          ") is not the planned device " + std::to_string(device));
  }
  auto fresh = std::make_unique<DeviceContext>();
  const cudnnStatus_t st = fe::detail::create_handle(&fresh->handle);
  if (st != CUDNN_STATUS_SUCCESS) return call_failed("cudnnCreate", fe::detail::get_error_string(st));
  ctx = std::move(fresh);
  return ctx.get();
}

// The uids a spec's graph reads or writes: the variant pack of an execution.
std::vector<Uid> graph_uids(const GraphSpec& s) {
  std::vector<Uid> u = {Uid::q, Uid::k, Uid::v, Uid::o};
  if (s.stats) u.push_back(Uid::stats);
  if (s.padded) u.insert(u.end(), {Uid::seq_q, Uid::seq_kv});
  if (s.ragged) {
    u.insert(u.end(), {Uid::ragged_q, Uid::ragged_o});
    if (!s.paged) u.insert(u.end(), {Uid::ragged_k, Uid::ragged_v});
    if (s.stats_ragged) u.push_back(Uid::ragged_stats);
  }
  if (s.paged) u.insert(u.end(), {Uid::page_table_k, Uid::page_table_v});
  if (s.sinks) u.push_back(Uid::sinks);
  if (s.fp8())
    u.insert(u.end(), {Uid::descale_q, Uid::descale_k, Uid::descale_v, Uid::descale_s, Uid::scale_s, Uid::scale_o,
                       Uid::amax_s, Uid::amax_o});
  return u;
}

// The frontend graph of a spec, validated (no device needed: the SM is set).
Result<std::shared_ptr<fe::graph::Graph>> describe(const GraphSpec& s) {
  using fe::graph::Tensor_attributes;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_sm_version(s.sm);  // before any node: nodes copy the context
  g->set_io_data_type(fe_type(s.io))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](Uid uid, const char* name, const Dims4& t) {
    return g->tensor(Tensor_attributes()
                         .set_uid(static_cast<int>(uid))
                         .set_name(name)
                         .set_dim(vec(t.dim))
                         .set_stride(vec(t.stride)));
  };
  // A [n, 1, 1, 1] column of lengths, offsets or scalars.
  auto column = [&](Uid uid, const char* name, std::int64_t n, fe::DataType_t type) {
    return g->tensor(Tensor_attributes()
                         .set_uid(static_cast<int>(uid))
                         .set_name(name)
                         .set_dim({n, 1, 1, 1})
                         .set_stride({1, 1, 1, 1})
                         .set_data_type(type));
  };
  const std::int64_t B = s.batch(), Hq = s.heads_q();
  auto Q = tensor(Uid::q, "Q", s.q);
  auto K = tensor(Uid::k, s.paged ? "container_K" : "K", s.k);
  auto V = tensor(Uid::v, s.paged ? "container_V" : "V", s.v);

  auto attrs =
      fe::graph::SDPA_attributes().set_name("attnkit_sdpa").set_generate_stats(s.stats).set_attn_scale(s.scale);
  if (s.window_left >= 0 || s.window_right >= 0) {
    attrs.set_diagonal_alignment(s.top_left ? fe::DiagonalAlignment_t::TOP_LEFT
                                            : fe::DiagonalAlignment_t::BOTTOM_RIGHT);
    if (s.window_right >= 0) attrs.set_diagonal_band_right_bound(s.window_right);
    // cuDNN keeps keys j > i + off - bound; attnkit keeps j >= i + off - left.
    if (s.window_left >= 0) attrs.set_diagonal_band_left_bound(s.window_left + 1);
  }
  if (s.padded)
    attrs.set_padding_mask(true)
        .set_seq_len_q(column(Uid::seq_q, "seq_q", B, fe::DataType_t::INT32))
        .set_seq_len_kv(column(Uid::seq_kv, "seq_kv", B, fe::DataType_t::INT32));
  const fe::DataType_t offset_type = s.offsets_int64 ? fe::DataType_t::INT64 : fe::DataType_t::INT32;
  std::shared_ptr<Tensor_attributes> ragged_o, ragged_stats;
  if (s.ragged) {
    Q->set_ragged_offset(column(Uid::ragged_q, "ragged_q", B + 1, offset_type));
    if (!s.paged) {
      K->set_ragged_offset(column(Uid::ragged_k, "ragged_k", B + 1, offset_type));
      V->set_ragged_offset(column(Uid::ragged_v, "ragged_v", B + 1, offset_type));
    }
    ragged_o = column(Uid::ragged_o, "ragged_o", B + 1, offset_type);
    if (s.stats_ragged) ragged_stats = column(Uid::ragged_stats, "ragged_stats", B + 1, offset_type);
  }
  if (s.paged) {
    auto table = [&](Uid uid, const char* name) {
      return g->tensor(Tensor_attributes()
                           .set_uid(static_cast<int>(uid))
                           .set_name(name)
                           .set_dim({B, 1, s.max_pages, 1})
                           .set_stride({s.max_pages, s.max_pages, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
    };
    attrs.set_paged_attention_k_table(table(Uid::page_table_k, "page_table_k"))
        .set_paged_attention_v_table(table(Uid::page_table_v, "page_table_v"))
        .set_paged_attention_max_seq_len_kv(static_cast<int>(s.seqlen_k()));
  }
  if (s.sinks)
    attrs.set_sink_token(g->tensor(Tensor_attributes()
                                       .set_uid(static_cast<int>(Uid::sinks))
                                       .set_name("sinks")
                                       .set_dim({1, Hq, 1, 1})
                                       .set_stride({Hq * s.sinks_stride, s.sinks_stride, 1, 1})
                                       .set_data_type(fe::DataType_t::FLOAT)));

  std::shared_ptr<Tensor_attributes> O, Stats;
  if (s.fp8()) {
    auto scalar = [&](Uid uid, const char* name) { return column(uid, name, 1, fe::DataType_t::FLOAT); };
    auto outs = g->sdpa_fp8(Q, K, V, scalar(Uid::descale_q, "descale_q"), scalar(Uid::descale_k, "descale_k"),
                            scalar(Uid::descale_v, "descale_v"), scalar(Uid::descale_s, "descale_s"),
                            scalar(Uid::scale_s, "scale_s"), scalar(Uid::scale_o, "scale_o"), attrs);
    O = outs[0];
    Stats = outs[1];
    for (auto [t, uid] : {std::pair{outs[2], Uid::amax_s}, {outs[3], Uid::amax_o}})
      t->set_output(true)
          .set_uid(static_cast<int>(uid))
          .set_dim({1, 1, 1, 1})
          .set_stride({1, 1, 1, 1})
          .set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto outs = g->sdpa(Q, K, V, attrs);
    O = outs[0];
    Stats = outs[1];
  }
  O->set_output(true)
      .set_uid(static_cast<int>(Uid::o))
      .set_dim(vec(s.o.dim))
      .set_stride(vec(s.o.stride))
      .set_data_type(fe_type(s.out));
  if (ragged_o) O->set_ragged_offset(ragged_o);
  if (s.stats) {
    Stats->set_output(true)
        .set_uid(static_cast<int>(Uid::stats))
        .set_dim(vec(s.stats_dims.dim))
        .set_stride(vec(s.stats_dims.stride))
        .set_data_type(fe::DataType_t::FLOAT);
    if (ragged_stats) Stats->set_ragged_offset(ragged_stats);
  }
  if (auto st = g->validate(); st.is_bad()) return refused(s, "validation", st);
  return g;
}

}  // namespace

class Graph {
 public:
  Graph(std::shared_ptr<fe::graph::Graph> g, DeviceContext* device, std::vector<Uid> uids)
      : fe_graph(std::move(g)), device(device), uids(std::move(uids)) {}
  std::shared_ptr<fe::graph::Graph> fe_graph;
  DeviceContext* device;
  std::vector<Uid> uids;
  std::unordered_map<std::int64_t, void*> pack;  // reused by every execution, under device->mutex
};

namespace {

struct Cache {
  std::mutex mutex;
  std::map<std::vector<std::int64_t>, Result<BuiltGraph>> graphs;
  CudnnGraphStats stats;
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: graphs must not be torn down after the driver
  return *c;
}

// The on-disk plan of a spec (plan_cache.hpp): its file and whole key, which
// names everything the serialized plan depends on besides the spec: cuDNN's
// and the frontend's versions and the GPU (a plan is only valid on an
// identical one). The device ordinal is not part of it.
struct StoredPlan {
  std::filesystem::path file;
  std::string key;
};
std::optional<StoredPlan> stored_plan(const GraphSpec& s) {
  auto dir = plan_cache_dir();
  if (!dir) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, s.device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  std::string key = "cudnn " + std::to_string(fe::detail::get_backend_version()) + " frontend " +
                    std::to_string(CUDNN_FRONTEND_VERSION) + " gpu " + prop.name + " sm " +
                    std::to_string(prop.major * 10 + prop.minor) + " sms " + std::to_string(prop.multiProcessorCount) +
                    " spec";
  std::vector<std::int64_t> fields = s.key();
  fields[0] = 0;  // the device ordinal: any identical GPU may use the plan
  for (std::int64_t f : fields) key += " " + std::to_string(f);
  return StoredPlan{plan_cache_file(*dir, key), std::move(key)};
}

// A plan read back from disk, or nullptr (missing, stale or unreadable: the
// caller builds it).
std::shared_ptr<fe::graph::Graph> load_plan(const StoredPlan& stored, DeviceContext& device) {
  auto bytes = read_plan(stored.file, stored.key);
  if (!bytes) return nullptr;
  try {
    // deserialize() warms the plan up in a capture on the handle's stream: the
    // default stream makes it capture on a stream of its own, never on a
    // caller's stream that an earlier execution left set.
    if (fe::detail::set_stream(device.handle, nullptr) != CUDNN_STATUS_SUCCESS) return nullptr;
    auto g = std::make_shared<fe::graph::Graph>();
    if (g->deserialize(device.handle, *bytes).is_bad()) return nullptr;
    return g;
  } catch (const std::exception&) {  // a malformed payload: the JSON parser throws
    return nullptr;
  }
}

// validate -> operation graph -> heuristics (mode A, PyTorch's choice, then
// the fallback list) -> cuDNN's support check -> plan build; or the stored
// plan of the same graph, which spares cuDNN's kernel compile.
Result<BuiltGraph> build(const GraphSpec& s, DeviceContext& device) {
  auto described = describe(s);  // validated every time: a refusal never comes from a file
  if (!described) return described.diagnostics();
  auto g = described.value();
  const std::optional<StoredPlan> stored = stored_plan(s);
  std::lock_guard lock(device.mutex);
  bool loaded = false;
  std::string store_failure;
  if (stored) {
    if (auto from_disk = load_plan(*stored, device)) {
      g = std::move(from_disk);
      loaded = true;
    }
  }
  if (!loaded) {
    if (auto st = g->build_operation_graph(device.handle); st.is_bad()) return refused(s, "operation graph", st);
    if (auto st = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); st.is_bad())
      return refused(s, "heuristics", st);
    if (auto st = g->check_support(); st.is_bad()) return refused(s, "support check", st);
    if (auto st = g->build_plans(); st.is_bad()) return refused(s, "plan build", st);
    if (std::vector<std::uint8_t> bytes; stored && g->serialize(bytes).is_good())
      write_plan(stored->file, stored->key, bytes, &store_failure);
  }
  std::int64_t workspace = 0;
  if (auto st = g->get_workspace_size(workspace); st.is_bad()) return refused(s, "workspace query", st);
  BuiltGraph built;
  built.graph = std::make_shared<Graph>(g, &device, graph_uids(s));
  built.workspace_bytes = workspace;
  built.loaded = loaded;
  built.store_failure = std::move(store_failure);
  return built;
}

}  // namespace

bool frontend_compiled() { return true; }

Diagnostics validate_spec(const GraphSpec& spec) {
  if (Diagnostics why = bind_library(); !why.ok()) return why;
  try {
    auto g = describe(spec);
    return g ? Diagnostics{} : g.diagnostics();
  } catch (const std::exception& e) {
    return call_failed("the cuDNN frontend (validation)", e.what());
  }
}

Result<BuiltGraph> find_or_build(const GraphSpec& spec) {
  if (Diagnostics why = bind_library(); !why.ok()) return why;
  Cache& c = cache();
  const std::vector<std::int64_t> key = spec.key();
  std::lock_guard lock(c.mutex);
  if (auto it = c.graphs.find(key); it != c.graphs.end()) {
    ++c.stats.cache_hits;
    if (!it->second) return it->second.diagnostics();
    BuiltGraph hit = it->second.value();
    hit.build_ms = 0.0;
    return hit;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<BuiltGraph> built = call_failed("the cuDNN frontend", "no graph");
  try {
    auto device = device_context(spec.device);
    if (!device) return device.diagnostics();  // not cached: a later call may have the device current
    built = build(spec, *device.value());
  } catch (const std::exception& e) {
    return call_failed("the cuDNN frontend (graph build)", e.what());  // not cached: not cuDNN's answer
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (built) {
    built.value().build_ms = ms;
    ++(built.value().loaded ? c.stats.loaded : c.stats.built);
    c.stats.last_build_ms = ms;
    c.stats.max_build_ms = std::max(c.stats.max_build_ms, ms);
    c.stats.total_build_ms += ms;
    if (!built.value().store_failure.empty() && c.stats.store_failures++ == 0)
      // Said once per process: the results are right, but every process pays cuDNN's compile again.
      std::fprintf(stderr,
                   "attnkit: cudnn plans are not stored on disk (%s), so each new process compiles cuDNN's kernels "
                   "again (0.4-1.6 s per configuration); set ATTNKIT_CUDNN_PLAN_CACHE to a writable directory, or "
                   "to 0 to turn the store off\n",
                   built.value().store_failure.c_str());
  } else {
    ++c.stats.refused;
  }
  c.graphs.emplace(key, built);
  return built;
}

Diagnostics execute(Graph& graph, const VariantPack& pack, void* workspace, void* stream) {
  std::lock_guard lock(graph.device->mutex);
  try {
    const cudnnStatus_t st = fe::detail::set_stream(graph.device->handle, static_cast<cudaStream_t>(stream));
    if (st != CUDNN_STATUS_SUCCESS) return call_failed("cudnnSetStream", fe::detail::get_error_string(st));
    for (Uid u : graph.uids) graph.pack[static_cast<int>(u)] = pack.ptr[static_cast<int>(u)];
    if (auto e = graph.fe_graph->execute(graph.device->handle, graph.pack, workspace); e.is_bad())
      return call_failed("cuDNN graph execute", e.get_message());
  } catch (const std::exception& e) {
    return call_failed("the cuDNN frontend (execute)", e.what());
  }
  return {};
}

Result<bool> stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return call_failed("cudaStreamIsCapturing", cudaGetErrorString(err));
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace attnkit::cudnn

namespace attnkit {
CudnnGraphStats cudnn_graph_stats() {
  auto& c = cudnn::cache();
  std::lock_guard lock(c.mutex);
  return c.stats;
}
}  // namespace attnkit
