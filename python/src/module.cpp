// attnkit._attnkit: the thinnest layer over the C++ API. Arrays arrive through
// DLPack (nanobind ndarray: numpy, torch, cupy, jax ...) as non-owning views;
// outputs are allocated by the Python layer in the caller's framework. Every
// failure is raised as attnkit.AttnkitError carrying the catalogued diagnostics.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <cstdint>
#include <memory>
#include <tuple>

#include "attnkit/backends/cudnn.hpp"
#include "attnkit/backends/registry.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/dlpack.hpp"
#include "attnkit/core/host_memory.hpp"
#include "attnkit/runtime/deployment.hpp"
#include "attnkit/dist/sequence_parallel.hpp"
#include "attnkit/select/selector.hpp"
#include "select/deployment_flags.hpp"

namespace nb = nanobind;
using namespace attnkit;

namespace {

struct DiagnosticError {
  Diagnostics diagnostics;
};

[[noreturn]] void raise(Diagnostics d) { throw DiagnosticError{std::move(d)}; }

template <class T>
T value_or_raise(Result<T> r) {
  if (!r) raise(r.diagnostics());
  return std::move(*r);
}

nb::dict to_dict(const Diagnostic& d) {
  nb::dict out;
  out["code"] = d.code;
  out["severity"] = std::string(severity_name(d.severity));
  out["message"] = d.message;
  out["meaning"] = d.meaning;
  out["solutions"] = d.solutions;
  out["example"] = d.example;
  return out;
}

std::string python_type_name(nb::handle h) {
  return nb::cast<std::string>(nb::handle(Py_TYPE(h.ptr())).attr("__name__"));
}

using In = nb::ndarray<nb::ro>;  // inputs may be read-only
using Out = nb::ndarray<>;

// `h` as a DLPack-backed array, or AK1112 naming the argument (nanobind's own
// failure would be a TypeError): None stays none.
template <class Array>
std::optional<Array> array_of(nb::handle h, const char* name) {
  if (h.is_none()) return std::nullopt;
  Array a;
  if (!nb::try_cast(h, a)) raise(diagnose("AK1112", {{"name", name}, {"type", python_type_name(h)}}));
  return a;
}

template <class Array>
std::optional<TensorView> view_of(const std::optional<Array>& a, const char* name) {
  if (!a) return std::nullopt;
  DLTensor t{};
  t.data = const_cast<void*>(static_cast<const void*>(a->data()));
  t.ndim = static_cast<int32_t>(a->ndim());
  t.dtype = DLDataType{a->dtype().code, a->dtype().bits, a->dtype().lanes};
  t.device = DLDevice{static_cast<DLDeviceType>(a->device_type()), a->device_id()};
  std::vector<std::int64_t> shape(a->ndim()), strides(a->ndim());
  for (std::size_t i = 0; i < a->ndim(); ++i) {
    shape[i] = static_cast<std::int64_t>(a->shape(i));
    strides[i] = a->stride(i);
  }
  t.shape = shape.data();
  t.strides = strides.data();
  auto v = from_dlpack(t, name);
  if (!v) raise(v.diagnostics());
  return *v;
}

// The arrays of one call, converted one by one (so a refusal names the
// argument) and kept referenced until the run returns, and the views a Plan
// runs on.
struct CallArrays {
  std::optional<In> q, k, v, sinks, gate, cu_seqlens_q, cu_seqlens_k, block_table, seqlens_k, block_offsets, block_indices;
  std::optional<Out> out, lse, workspace_array;
  AttentionTensors tensors;
  Workspace workspace;
};

CallArrays bind_arrays(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, nb::handle sinks,
                       nb::handle gate, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, nb::handle block_table, nb::handle seqlens_k,
                       nb::handle block_offsets, nb::handle block_indices, nb::handle workspace) {
  CallArrays c;
  c.q = array_of<In>(q, "q"), c.k = array_of<In>(k, "k"), c.v = array_of<In>(v, "v");
  c.sinks = array_of<In>(sinks, "sinks");
  c.gate = array_of<In>(gate, "gate");
  c.cu_seqlens_q = array_of<In>(cu_seqlens_q, "cu_seqlens_q"), c.cu_seqlens_k = array_of<In>(cu_seqlens_k, "cu_seqlens_k");
  c.block_table = array_of<In>(block_table, "block_table"), c.seqlens_k = array_of<In>(seqlens_k, "cache_seqlens");
  c.block_offsets = array_of<In>(block_offsets, "block_offsets");
  c.block_indices = array_of<In>(block_indices, "block_indices");
  c.out = array_of<Out>(out, "out"), c.lse = array_of<Out>(lse, "lse");
  c.workspace_array = array_of<Out>(workspace, "workspace");
  AttentionTensors& t = c.tensors;
  for (auto [view, array, name] : {std::tuple<TensorView*, const std::optional<In>*, const char*>{&t.q, &c.q, "q"},
                                   {&t.k, &c.k, "k"}, {&t.v, &c.v, "v"}, {&t.sinks, &c.sinks, "sinks"}, {&t.gate, &c.gate, "gate"},
                                   {&t.cu_seqlens_q, &c.cu_seqlens_q, "cu_seqlens_q"},
                                   {&t.cu_seqlens_k, &c.cu_seqlens_k, "cu_seqlens_k"},
                                   {&t.block_table, &c.block_table, "block_table"},
                                   {&t.seqlens_k, &c.seqlens_k, "cache_seqlens"},
                                   {&t.block_offsets, &c.block_offsets, "block_offsets"},
                                   {&t.block_indices, &c.block_indices, "block_indices"}})
    if (auto x = view_of(*array, name)) *view = *x;
  if (auto x = view_of(c.out, "out")) t.out = *x;
  if (auto x = view_of(c.lse, "lse")) t.lse = *x;
  if (c.workspace_array) c.workspace = {static_cast<std::byte*>(c.workspace_array->data()), c.workspace_array->nbytes()};
  return c;
}

// A run's refusal diagnostics (empty list: it ran); the Python layer raises
// them, so no C++ exception crosses a run.
nb::list refusals(const Diagnostics& ran) {
  nb::list refused;
  if (!ran.ok())
    for (const Diagnostic& d : ran) refused.append(to_dict(d));
  return refused;
}

std::string device_of(const Platform& platform) { return platform.kind == PlatformKind::cuda ? "cuda" : "cpu"; }

// What the Python layer runs: a plan for one call, or a Deployment layer bound
// to a Problem. run() binds the arrays, launches without the GIL (CPU kernels
// run threads; let Python go on) and returns the refusal diagnostics.
struct PyRunnable {
  virtual ~PyRunnable() = default;
  virtual Diagnostics launch(const AttentionTensors& t, Workspace ws, StreamHandle stream) = 0;

  nb::list run(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, nb::handle sinks,
               nb::handle gate, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, nb::handle block_table, nb::handle seqlens_k,
               nb::handle block_offsets, nb::handle block_indices, nb::handle workspace, std::uintptr_t stream) {
    const CallArrays c = bind_arrays(q, k, v, out, lse, sinks, gate, cu_seqlens_q, cu_seqlens_k, block_table, seqlens_k,
                                     block_offsets, block_indices, workspace);
    Diagnostics ran;
    {
      nb::gil_scoped_release release;
      ran = launch(c.tensors, c.workspace, reinterpret_cast<StreamHandle>(stream));
    }
    return refusals(ran);
  }
};

// A planned attention call: the backend, its platform and workspace size.
struct PyPlan final : PyRunnable {
  PyPlan(std::unique_ptr<Plan> p, std::string b, Platform pl)
      : plan(std::move(p)), backend(std::move(b)), platform(std::move(pl)) {}
  std::unique_ptr<Plan> plan;
  std::string backend;
  Platform platform;

  std::size_t workspace_bytes() const { return plan->workspace_bytes(); }
  std::string out_dtype() const { return std::string(dtype_name(plan->problem().out_dtype())); }
  std::string device() const { return device_of(platform); }
  Diagnostics launch(const AttentionTensors& t, Workspace ws, StreamHandle stream) override {
    return plan->run(t, ws, stream);
  }
};

// A Deployment layer bound to one Problem: what the Python layer caches per
// call shape, as it caches a PyPlan. The plan comes from the layer each time,
// so an applied request switches what runs.
struct PyLayerCall final : PyRunnable {
  PyLayerCall(runtime::AttentionLayer* l, Problem p) : layer(l), problem(std::move(p)) {}
  runtime::AttentionLayer* layer;
  Problem problem;

  std::string backend() const { return std::string(layer->backend().name()); }
  std::string out_dtype() const { return std::string(dtype_name(problem.out_dtype())); }
  std::size_t workspace_bytes() const {
    auto plan = layer->plan(problem);
    if (!plan) raise(plan.diagnostics());
    return (*plan)->workspace_bytes();
  }
  Diagnostics launch(const AttentionTensors& t, Workspace ws, StreamHandle stream) override {
    return layer->run(problem, t, ws, stream);
  }
};

// A Python size (any int64) as the int a Problem holds, or AK1012.
int int32_arg(const char* field, std::int64_t value) {
  if (value >= INT32_MIN && value <= INT32_MAX) return static_cast<int>(value);
  raise(diagnose("AK1012", {{"what", field}, {"value", std::to_string(value)},
                            {"limit", "the int32 range [-2147483648, 2147483647]"}}));
}

Problem make_problem(const std::string& layout, std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k,
                     std::int64_t heads_q, std::int64_t heads_kv, std::int64_t head_dim_qk, std::int64_t head_dim_v,
                     const std::string& dtype, bool causal, std::pair<std::int64_t, std::int64_t> window, float softcap,
                     std::optional<float> scale, bool has_sinks, bool has_gate, bool return_lse,
                     std::optional<std::int64_t> page_size,
                     std::optional<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> block_sparse,
                     std::optional<std::tuple<std::int64_t, std::int64_t, std::int64_t>> video) {
  Problem p;
  const auto l = parse_layout(layout);
  if (!l) raise(diagnose("AK1102", {{"name", "q"}, {"rank", "?"}, {"expected", "bshd, bhsd or thd"}, {"layout", layout}}));
  p.layout = *l;
  p.batch = int32_arg("batch", batch);
  p.seqlen_q = int32_arg("seqlen_q", seqlen_q);
  p.seqlen_k = int32_arg("seqlen_k", seqlen_k);
  p.heads_q = int32_arg("heads_q", heads_q);
  p.heads_kv = int32_arg("heads_kv", heads_kv);
  p.head_dim_qk = int32_arg("head_dim_qk", head_dim_qk);
  p.head_dim_v = int32_arg("head_dim_v", head_dim_v);
  const int left = int32_arg("window_size[0]", window.first), right = int32_arg("window_size[1]", window.second);
  const auto t = parse_dtype(dtype);
  if (!t) raise(diagnose("AK1007", {{"role", "q"}, {"dtype", dtype}, {"reason", "unknown dtype"}}));
  p.dtype = *t;
  if (left != -1 || right != -1) {  // any other value is a window, or refused as one (AK1004)
    p.mask = MaskKind::sliding_window;
    p.window = {left, causal ? 0 : right};
  } else if (causal) {
    p.mask = MaskKind::causal;
  }
  p.softcap = softcap;
  p.scale = scale;
  p.has_sinks = has_sinks;
  p.has_gate = has_gate;
  p.return_lse = return_lse;
  if (page_size) p.paged_kv = PagedKv{int32_arg("page_size", *page_size)};
  if (block_sparse) {
    const auto [block_q, block_k, lists_batch, lists_heads] = *block_sparse;
    p.block_sparse = BlockSparse{int32_arg("block_q", block_q), int32_arg("block_k", block_k),
                                 int32_arg("block_layout[0]", lists_batch), int32_arg("block_layout[1]", lists_heads)};
  }
  if (video)
    p.video = VideoGrid{int32_arg("video_grid[0]", std::get<0>(*video)), int32_arg("video_grid[1]", std::get<1>(*video)),
                        int32_arg("video_grid[2]", std::get<2>(*video))};
  Diagnostics why = validate_problem(p);
  if (!why.ok()) raise(why);
  return p;
}

// The backend for one call (explicit name, else the global force, else auto),
// on this machine's GPU or CPU, matching where the data lives.
PyPlan make_plan(const Problem& p, const std::string& backend, const std::string& device) {
  std::vector<Platform> platforms;
  for (const Platform& pl : detect_local_platforms())
    if ((device == "cuda") == (pl.kind == PlatformKind::cuda)) platforms.push_back(pl);
  if (platforms.empty())
    raise(diagnose("AK6002", {{"reason", "the arrays are on a CUDA device but no usable GPU or CUDA build was found"}}));
  auto decision = select::select_for_call(p, platforms, backend);
  if (!decision) raise(decision.diagnostics());
  auto plan = decision->backend->plan(p, decision->platform);
  if (!plan) raise(plan.diagnostics());
  return PyPlan{std::move(*plan), std::string(decision->backend->name()), decision->platform};
}

nb::object from_json(const std::string& text) { return nb::module_::import_("json").attr("loads")(text); }

// The Problem the block-sparse helpers need: the list layout and the lengths.
Problem lists_problem(std::int64_t lists_batch, std::int64_t lists_heads, std::int64_t seqlen_q, std::int64_t seqlen_k,
                      std::int64_t block_q, std::int64_t block_k) {
  Problem p;
  p.batch = int32_arg("block_layout[0]", lists_batch);
  p.heads_q = p.heads_kv = int32_arg("block_layout[1]", lists_heads);
  p.seqlen_q = int32_arg("seqlen_q", seqlen_q);
  p.seqlen_k = int32_arg("seqlen_k", seqlen_k);
  p.block_sparse = BlockSparse{int32_arg("block_q", block_q), int32_arg("block_k", block_k), p.batch, p.heads_q};
  Diagnostics why = validate_problem(p);
  if (!why.ok()) raise(why);
  return p;
}

// A dense uint8 block mask (host) [lists_batch, lists_heads, q blocks, k blocks] as CSR lists.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> sparse_from_mask(nb::handle mask, std::int64_t seqlen_q,
                                                                                 std::int64_t seqlen_k,
                                                                                 std::int64_t block_q,
                                                                                 std::int64_t block_k) {
  const auto array = array_of<In>(mask, "block_mask");
  if (!array) raise(diagnose("AK1101", {{"name", "block_mask"}, {"reason", "got None; pass a uint8 host array"}}));
  const TensorView m = *view_of(array, "block_mask");
  if (m.rank != 4)
    raise(diagnose("AK1102", {{"name", "block_mask"}, {"rank", std::to_string(m.rank)}, {"expected", "4"},
                              {"layout", "[lists_batch, lists_heads, q blocks, k blocks]"}}));
  const Problem p = lists_problem(m.shape[0], m.shape[1], seqlen_q, seqlen_k, block_q, block_k);
  BlockSparseLists lists = value_or_raise(block_sparse_from_mask(p, m));
  return {std::move(lists.offsets), std::move(lists.indices)};
}

// CSR lists (host) as the flat contents of the dense mask of sparse_from_mask.
std::vector<std::uint8_t> sparse_dense_mask(nb::handle offsets, nb::handle indices, std::int64_t lists_batch,
                                            std::int64_t lists_heads, std::int64_t seqlen_q, std::int64_t seqlen_k,
                                            std::int64_t block_q, std::int64_t block_k) {
  const Problem p = lists_problem(lists_batch, lists_heads, seqlen_q, seqlen_k, block_q, block_k);
  const auto off = array_of<In>(offsets, "block_offsets"), idx = array_of<In>(indices, "block_indices");
  for (auto [a, name] : {std::pair{&off, "block_offsets"}, {&idx, "block_indices"}})
    if (!*a) raise(diagnose("AK1101", {{"name", name}, {"reason", "got None; pass an int32 host array"}}));
  const HostTensor mask =
      value_or_raise(block_sparse_dense_mask(p, *view_of(off, "block_offsets"), *view_of(idx, "block_indices")));
  const auto* bytes = mask.view().ptr<const std::uint8_t>();
  return {bytes, bytes + mask.view().numel()};
}

// A sequence-parallel plan over `comm` (attnkit.dist): collective, every rank
// calls it with the same problem; the platform follows where the data lives.
PyPlan make_dist_plan(const Problem& p, std::int64_t ring_arg, std::int64_t ulysses_arg, std::int64_t replicated_arg,
                      const std::string& backend, const std::string& device, int device_index,
                      std::shared_ptr<dist::Communicator> comm) {
  const int ring = int32_arg("ring_degree", ring_arg), ulysses = int32_arg("ulysses_degree", ulysses_arg),
            replicated = int32_arg("replicated_tokens", replicated_arg);
  std::optional<Platform> platform = device == "cuda" ? detect_cuda_platform() : detect_cpu_platform();
  if (!platform)
    raise(diagnose("AK6002", {{"reason", "the arrays are on a CUDA device but no usable GPU or CUDA build was found"}}));
  platform->device_index = device_index;
  platform->communicator = std::move(comm);
  const dist::SequenceParallel sp{ring, ulysses, replicated};
  Problem probe = p;
  probe.return_lse = p.return_lse || ring > 1;  // ring hops need the LSE of their inner backend
  auto decision = select::select_for_call(probe, {*platform}, backend);
  if (!decision) raise(decision.diagnostics());
  auto plan = dist::plan_sequence_parallel(p, sp, *decision->backend, *platform);
  if (!plan) raise(plan.diagnostics());
  return PyPlan{std::move(*plan), std::string(decision->backend->name()), *platform};
}

nb::dict check_argv(const std::vector<std::string>& args) {
  auto config = select::parse_deployment_args(args);
  if (!config) raise(config.diagnostics());
  const select::CheckResult r = select::check_deployment(*config);
  return nb::cast<nb::dict>(from_json(select::check_result_json(r, -1)));
}

std::unique_ptr<runtime::Deployment> deployment_from_argv(const std::vector<std::string>& args) {
  auto config = select::parse_deployment_args(args);
  if (!config) raise(config.diagnostics());
  auto d = runtime::Deployment::create(*config);
  if (!d) raise(d.diagnostics());
  return std::move(*d);
}

runtime::PreparedRequest prepare_request(runtime::Deployment& d, const std::string& override_backend,
                                         const std::string& skip_softmax_params, std::int64_t step) {
  runtime::Request request{override_backend, std::nullopt, step};
  if (!skip_softmax_params.empty()) {
    auto parsed = select::parse_backend_config(skip_softmax_params);
    if (!parsed) raise(parsed.diagnostics());
    request.skip_softmax_params = parsed->values;
  }
  auto prepared = d.prepare(request);
  if (!prepared) raise(prepared.diagnostics());
  return *prepared;
}

nb::dict page_dict(const CatalogEntry& e) {
  nb::dict d;
  d["code"] = e.code;
  d["title"] = e.title;
  d["message"] = e.message;
  d["meaning"] = e.meaning;
  d["solutions"] = e.solutions;
  d["example_before"] = e.example_before;
  d["example_after"] = e.example_after;
  d["when"] = e.when;
  d["related"] = e.related;
  d["engine_messages"] = e.engine_messages;
  return d;
}

// A code's page (a dict), or the pages covering an error text, best first
// (dicts with 'score' and 'matched'); AK0001 / AK0004 raised as explain_text says.
nb::object explain(const std::string& text) {
  Result<Explanation> found = explain_text(text);
  if (!found) raise(found.diagnostics());
  if (found->page) return page_dict(*found->page);
  nb::list out;
  for (const CatalogMatch& m : found->matches) {
    nb::dict d = page_dict(*m.entry);
    d["score"] = m.score;
    d["matched"] = m.matched;
    out.append(d);
  }
  return out;
}

}  // namespace

NB_MODULE(_attnkit, m) {
  m.doc() = "attnkit native module (use the `attnkit` package, not this module)";

  // Every failure leaves as AttnkitError with a code: refusals, and whatever
  // C++ exception escaped them (out of memory: AK1013; anything else: AK0003).
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    auto raise_python = [](const Diagnostics& why) {
      nb::list diags;
      for (const Diagnostic& d : why) diags.append(to_dict(d));
      nb::object cls = nb::module_::import_("attnkit._errors").attr("AttnkitError");
      nb::object err = cls(diags);
      PyErr_SetObject(cls.ptr(), err.ptr());
    };
    try {
      std::rethrow_exception(p);
    } catch (const DiagnosticError& e) {
      raise_python(e.diagnostics);
    } catch (const nb::python_error&) {
      throw;  // a Python exception raised inside: nanobind restores it
    } catch (const nb::builtin_exception&) {
      throw;
    } catch (const std::bad_alloc&) {
      raise_python(host_allocation_failed("this call", -1));
    } catch (const std::exception& e) {
      raise_python(diagnose("AK0003", {{"detail", e.what()}}));
    }
  });

  nb::class_<Problem>(m, "Problem")
      .def_prop_ro("summary", &Problem::summary)
      .def_prop_ro("flops", &Problem::flops)
      .def_prop_ro("softmax_scale", &Problem::softmax_scale)
      .def_prop_ro("out_dtype", [](const Problem& p) { return std::string(dtype_name(p.out_dtype())); })
      .def("__repr__", [](const Problem& p) { return "attnkit.Problem(" + p.summary() + ")"; });

  m.def("make_problem", &make_problem, nb::arg("layout"), nb::arg("batch"), nb::arg("seqlen_q"), nb::arg("seqlen_k"),
        nb::arg("heads_q"), nb::arg("heads_kv"), nb::arg("head_dim_qk"), nb::arg("head_dim_v"), nb::arg("dtype"),
        nb::arg("causal"), nb::arg("window"), nb::arg("softcap"), nb::arg("scale").none(), nb::arg("has_sinks"),
        nb::arg("has_gate"), nb::arg("return_lse"), nb::arg("page_size").none(), nb::arg("block_sparse").none(),
        nb::arg("video").none());
  m.def("block_sparse_from_mask", &sparse_from_mask, nb::arg("mask"), nb::arg("seqlen_q"), nb::arg("seqlen_k"),
        nb::arg("block_q"), nb::arg("block_k"));
  m.def("block_sparse_dense_mask", &sparse_dense_mask, nb::arg("offsets"), nb::arg("indices"),
        nb::arg("lists_batch"), nb::arg("lists_heads"), nb::arg("seqlen_q"), nb::arg("seqlen_k"), nb::arg("block_q"),
        nb::arg("block_k"));

  nb::class_<PyRunnable>(m, "Runnable")
      .def("run", &PyRunnable::run, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse").none(),
           nb::arg("sinks").none(), nb::arg("gate").none(), nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(),
           nb::arg("block_table").none(), nb::arg("seqlens_k").none(), nb::arg("block_offsets").none(),
           nb::arg("block_indices").none(), nb::arg("workspace").none(), nb::arg("stream"));

  nb::class_<PyPlan, PyRunnable>(m, "Plan")
      .def_prop_ro("backend", [](const PyPlan& p) { return p.backend; })
      .def_prop_ro("device", &PyPlan::device)
      .def_prop_ro("platform", [](const PyPlan& p) { return p.platform.label(); })
      .def_prop_ro("workspace_bytes", &PyPlan::workspace_bytes)
      .def_prop_ro("out_dtype", &PyPlan::out_dtype);

  m.def("plan", &make_plan, nb::arg("problem"), nb::arg("backend"), nb::arg("device"));

  // ---- deployments (attnkit.Deployment wraps these) -------------------------------
  nb::class_<runtime::PreparedRequest>(m, "PreparedRequest")
      .def_prop_ro("backend", &runtime::PreparedRequest::backend)
      .def_prop_ro("step", &runtime::PreparedRequest::step);

  nb::class_<PyLayerCall, PyRunnable>(m, "LayerCall")
      .def_prop_ro("backend", &PyLayerCall::backend)
      .def_prop_ro("workspace_bytes", &PyLayerCall::workspace_bytes)
      .def_prop_ro("out_dtype", &PyLayerCall::out_dtype);

  nb::class_<runtime::AttentionLayer>(m, "AttentionLayer")
      .def_prop_ro("component", &runtime::AttentionLayer::component)
      .def_prop_ro("role", &runtime::AttentionLayer::role)
      .def_prop_ro("index", &runtime::AttentionLayer::index)
      .def_prop_ro("switchable", &runtime::AttentionLayer::switchable)
      .def_prop_ro("backend", [](const runtime::AttentionLayer& l) { return std::string(l.backend().name()); })
      .def_prop_ro("decision", [](const runtime::AttentionLayer& l) {
        return from_json(select::decision_json(l.decision(), -1));
      })
      .def_prop_ro("causal", [](const runtime::AttentionLayer& l) { return l.decision().problem.mask == MaskKind::causal; })
      .def_prop_ro("planned_shapes", &runtime::AttentionLayer::planned_shapes)
      .def("bind", [](runtime::AttentionLayer& l, const Problem& p) { return PyLayerCall{&l, p}; }, nb::arg("problem"),
           nb::keep_alive<0, 1>());

  nb::class_<runtime::Deployment>(m, "Deployment")
      .def_static("create", &deployment_from_argv, nb::arg("args"),
                  "Runs the selection of `attnkit check ARGS` on this machine; raises what check reports.")
      .def_prop_ro("selection", [](const runtime::Deployment& d) {
        return from_json(select::check_result_json(d.selection(), -1));
      })
      .def_prop_ro("platform", [](const runtime::Deployment& d) { return d.platform().label(); })
      .def_prop_ro("device", [](const runtime::Deployment& d) { return device_of(d.platform()); })
      .def("layer", [](runtime::Deployment& d, const std::string& component, const std::string& role,
                       std::int64_t index) {
        auto l = d.layer(component, role, index);
        if (!l) raise(l.diagnostics());
        return *l;
      }, nb::arg("component"), nb::arg("role"), nb::arg("index"), nb::rv_policy::reference_internal)
      .def("audit", [](const runtime::Deployment& d) { return from_json(select::diagnostics_json(d.audit(), -1)); })
      .def("prepare", &prepare_request, nb::arg("attention_backend_override"), nb::arg("skip_softmax_params"),
           nb::arg("step"))
      .def("apply", &runtime::Deployment::apply, nb::arg("prepared"))
      .def("active", &runtime::Deployment::active);
  // ---- attnkit.dist: communicators and sequence-parallel plans
  nb::class_<dist::Communicator>(m, "Communicator")
      .def_prop_ro("rank", &dist::Communicator::rank)
      .def_prop_ro("size", &dist::Communicator::size)
      .def_prop_ro("kind", [](const dist::Communicator& c) { return std::string(c.kind()); })
      .def("__repr__", [](const dist::Communicator& c) {
        return "attnkit.dist.Communicator(" + std::string(c.kind()) + ", rank " + std::to_string(c.rank()) + " of " +
               std::to_string(c.size()) + ")";
      });
  m.def("dist_mpi_world", [] { return value_or_raise(dist::mpi_world()); });
  m.def("dist_mpi_from_handle", [](std::uintptr_t h) { return value_or_raise(dist::mpi_from_handle(h)); }, nb::arg("handle"));
  m.def("dist_nccl_unique_id", [] {
    const dist::NcclUniqueId id = value_or_raise(dist::nccl_unique_id());
    return nb::bytes(reinterpret_cast<const char*>(id.data()), id.size());
  });
  m.def("dist_nccl_communicator", [](nb::bytes id, int rank, int size, int device) {
    dist::NcclUniqueId uid{};
    if (id.size() != uid.size()) raise(diagnose("AK5010", {{"kind", "NCCL"}, {"reason", "the unique id must be 128 bytes"}}));
    std::memcpy(uid.data(), id.c_str(), uid.size());
    return value_or_raise(dist::make_nccl_communicator(uid, rank, size, device));
  }, nb::arg("unique_id"), nb::arg("rank"), nb::arg("size"), nb::arg("device"));
  m.def("dist_mpi_compiled", &dist::mpi_compiled);
  m.def("dist_nccl_compiled", &dist::nccl_compiled);
  // The split tokens rank `rank` holds of a sequence of `n` (after any replicated text).
  m.def("dist_rank_tokens", [](std::int64_t n, std::int64_t ring, std::int64_t ulysses, bool causal, std::int64_t rank) {
    // Checked before rank_tokens divides by the degrees (ring_degree=0 was SIGFPE) or
    // cuts a rank that does not exist (an empty shard, silently).
    for (const auto& [what, value] : {std::pair{"ring_degree", ring}, {"ulysses_degree", ulysses}})
      if (value > INT32_MAX)
        raise(diagnose("AK1012", {{"what", what}, {"value", std::to_string(value)}, {"limit", std::to_string(INT32_MAX)}}));
    if (Diagnostics why = dist::check_parallel_degrees(static_cast<int>(std::max<std::int64_t>(ring, INT32_MIN)),
                                                       static_cast<int>(std::max<std::int64_t>(ulysses, INT32_MIN)),
                                                       std::nullopt);
        !why.ok())
      raise(why);
    if (rank < 0 || rank >= ring * ulysses)
      raise(diagnose("AK5008", {{"what", "the shard of rank " + std::to_string(rank)},
                                {"reason", "ring_degree x ulysses_degree = " + std::to_string(ring * ulysses) +
                                               " ranks are numbered 0 to " + std::to_string(ring * ulysses - 1)}}));
    if (n < 0)
      raise(diagnose("AK5008", {{"what", "a sequence of " + std::to_string(n) + " split tokens"},
                                {"reason", "the replicated tokens are more than the sequence holds"}}));
    const dist::SequenceParallel sp{static_cast<int>(ring), static_cast<int>(ulysses), 0};
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const dist::TokenRange& r : dist::rank_tokens(n, sp, static_cast<int>(rank), causal && ring > 1))
      out.emplace_back(r.start, r.length);
    return out;
  }, nb::arg("n"), nb::arg("ring"), nb::arg("ulysses"), nb::arg("causal"), nb::arg("rank"));
  // Every rank's `value` summed (a host all-gather): the global length from local ones.
  m.def("dist_sum", [](dist::Communicator& c, std::int64_t value) {
    std::vector<std::int64_t> all(c.size());
    if (Diagnostics why = c.all_gather_host(&value, sizeof value, all.data()); !why.ok()) raise(why);
    std::int64_t sum = 0;
    for (std::int64_t x : all) sum += x;
    return sum;
  }, nb::arg("comm"), nb::arg("value"));
  m.def("dist_plan", &make_dist_plan, nb::arg("problem"), nb::arg("ring"), nb::arg("ulysses"), nb::arg("replicated"),
        nb::arg("backend"), nb::arg("device"), nb::arg("device_index"), nb::arg("comm"));
  m.def("backends", [] { return default_registry().names(); });
  m.def("cudnn_graph_stats", [] {
    const CudnnGraphStats s = cudnn_graph_stats();
    nb::dict d;
    d["built"] = s.built;
    d["loaded"] = s.loaded;
    d["refused"] = s.refused;
    d["cache_hits"] = s.cache_hits;
    d["store_failures"] = s.store_failures;
    d["last_build_ms"] = s.last_build_ms;
    d["max_build_ms"] = s.max_build_ms;
    d["total_build_ms"] = s.total_build_ms;
    return d;
  }, "Counters of the cudnn backend's graph cache in this process (builds, plans loaded from disk, refusals, hits, build ms).");
  m.def("check", &check_argv, nb::arg("args"),
        "Runs `attnkit check` on engine flags; returns the design's JSON shape as a dict.");
  m.def("set_global_force", &select::set_global_force_backend, nb::arg("name"));
  m.def("global_force", &select::global_force_backend);
  m.def("explain", &explain, nb::arg("text"),
        "A code's catalog page (a dict), or for any other text the pages covering that error message, best first "
        "(a list of dicts with 'score' and 'matched').");
  // The catalogued diagnostic `code` with its template filled from `args`: the
  // Python layer's refusals read the same pages as the C++ ones.
  m.def("diagnose", [](const std::string& code, const std::map<std::string, std::string>& args) {
    const std::vector<std::pair<std::string_view, std::string>> list(args.begin(), args.end());
    return to_dict(diagnose_args(code, list));
  });
  m.def("host_allocation_failed", [](const std::string& what, std::int64_t bytes) {
    return to_dict(host_allocation_failed(what, bytes));
  });
  // Empty when `bytes` of host memory are available, else the AK1013 diagnostics.
  m.def("check_host_allocation", [](const std::string& what, std::int64_t bytes) {
    nb::list out;
    for (const Diagnostic& d : check_host_allocation(what, bytes)) out.append(to_dict(d));
    return out;
  });
}
