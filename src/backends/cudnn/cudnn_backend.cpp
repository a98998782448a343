// The cudnn backend's host glue: capabilities, check, plans, runs. Plain C++;
// the cuDNN frontend sits behind graph.hpp, the two helper kernels behind
// aux_kernels.hpp.
//
// check() = declared capabilities + cuDNN's support surface for the platform's
// release (support.cpp) + on this machine the graph build itself, so cuDNN's
// own refusal is a reason the selector sees (AK2113) and a check that passes
// never meets a plan that fails. plan() finds that graph in the cache.
#include "attnkit/backends/cudnn.hpp"

#include <deque>
#include <mutex>
#include <utility>

#include "backends/cudnn/aux_kernels.hpp"
#include "backends/cudnn/graph.hpp"
#include "backends/cudnn/support.hpp"
#include "platform/cudnn_library.hpp"
#if defined(ATTNKIT_HAS_CUDA)
#include "backends/cuda/device.hpp"
#endif

namespace attnkit {
namespace {

Capabilities cudnn_capabilities() {
  Capabilities c;
  c.platforms = {PlatformKind::cuda};
  c.min_sm = 80;
  c.dtypes = {DType::f16, DType::bf16, DType::f8e4m3};  // fp8: Blackwell only (support.cpp says why)
  c.max_head_dim = 256;
  c.distinct_v_head_dim = true;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window};
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.gqa = c.sinks = c.lse = c.paged_kv = true;
  c.softcap = false;  // cuDNN's score modifiers exclude its masks and padding: not wired
  c.required_library = "cudnn";
  c.built = cudnn::frontend_compiled();
  return c;
}

// The device a plan on this machine builds for: the current one.
struct Target {
  int device = 0;
  int sm = 0;
};
Result<Target> current_target() {
#if defined(ATTNKIT_HAS_CUDA)
  auto props = cuda::current_device_properties();
  if (!props) return props.diagnostics();
  return Target{props.value().index, props.value().sm};
#else
  return diagnose("AK6002", {{"reason", "this build has no CUDA"}});
#endif
}

// The graph of `p` bound contiguously, as plan() runs it. Packed problems with
// an LSE try cuDNN's ragged [total, h] stats first (PyTorch's layout), then
// padded [b, h, s] stats.
struct Planned {
  cudnn::GraphSpec spec;
  cudnn::BuiltGraph graph;
};
Result<Planned> plan_graph(const Problem& p, const Target& target) {
  const bool try_ragged_stats = p.layout == Layout::thd && p.return_lse;
  Diagnostics refusals;
  for (bool stats_ragged : {true, false}) {
    if (stats_ragged && !try_ragged_stats) continue;
    cudnn::GraphSpec spec =
        cudnn::make_graph_spec(p, cudnn::canonical_binding(p), target.device, target.sm, stats_ragged);
    auto built = cudnn::find_or_build(spec);
    if (built) return Planned{spec, built.value()};
    refusals.append(built.diagnostics());
    if (!built.diagnostics().has_code("AK2113")) break;  // a failure, not cuDNN's answer: do not retry
  }
  return refusals;
}

// The helper kernels (aux_kernels.cu, compiled with CUDA) on the caller's stream.
#if defined(ATTNKIT_HAS_CUDA)
Diagnostics enqueue(const cudnn::PrepareParams& p, StreamHandle stream) {
  return cuda::check_cuda(cudnn::launch_prepare(p, stream), "cudnn prepare kernel");
}
Diagnostics enqueue(const cudnn::FinishParams& p, StreamHandle stream) {
  return cuda::check_cuda(cudnn::launch_finish(p, stream), "cudnn finish kernel");
}
#else
template <class Params>
Diagnostics enqueue(const Params&, StreamHandle) {
  return diagnose("AK6002", {{"reason", "this build has no CUDA (cudnn helper kernels)"}});
}
#endif

// Scratch after cuDNN's own workspace, 256-byte aligned pieces, sized from the
// Problem alone (every binding of a plan fits).
struct AuxLayout {
  static constexpr std::int64_t kNone = -1;
  std::int64_t seq_q = kNone, seq_kv = kNone, page_table = kNone, bad_pages = kNone, stats = kNone, scalars = kNone;
  std::int64_t ragged[5] = {kNone, kNone, kNone, kNone, kNone};  // q, k, v, o, stats
  std::int64_t bytes = 0;

  explicit AuxLayout(const Problem& p) {
    const cudnn::GraphDims g = cudnn::graph_dims(p);  // the graph's batch and lengths: cuDNN reads that many
    const std::int64_t B = g.batch;
    auto add = [&](std::int64_t n) {
      const std::int64_t at = bytes;
      bytes += (n + 255) / 256 * 256;
      return at;
    };
    if (cudnn::needs_padding_mask(p)) {
      seq_q = add(4 * B);
      seq_kv = add(4 * B);
    }
    if (p.layout == Layout::thd) {
      for (int r = 0; r < 5; ++r) {
        const bool kv = r == 1 || r == 2;
        if ((kv && p.paged_kv) || (r == 4 && !p.return_lse)) continue;
        ragged[r] = add(8 * (B + 1));  // room for 64-bit offsets
      }
      if (p.return_lse) stats = add(4 * B * p.heads_q * g.seqlen_q);
    }
    if (p.paged_kv) {
      page_table = add(4 * B * g.max_pages);
      bad_pages = add(4 * B);
    }
    if (p.dtype == DType::f8e4m3 || p.dtype == DType::f8e5m2) scalars = add(8 * 4);
  }
};

class CudnnPlan final : public Plan {
 public:
  // A plan for a named platform: validated, never run here.
  CudnnPlan(Problem p, std::string platform) : Plan(std::move(p)), aux_(problem()), named_(std::move(platform)) {}
  CudnnPlan(Problem p, Planned planned, Target target)
      : Plan(std::move(p)),
        aux_(problem()),
        target_(target),
        primary_(std::move(planned.spec), std::move(planned.graph)),
        primary_shape_(cudnn::canonical_binding(problem())) {
    cudnn_bytes_ = (primary_.second.workspace_bytes + 255) / 256 * 256;
  }

  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(cudnn_bytes_ + aux_.bytes); }

  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    Diagnostics why = validate_binding(problem(), t, {DeviceKind::cuda, 0, 16});
    if (!why.ok()) return why;
    if (!primary_.second.graph)
      return diagnose("AK6002", {{"reason", "this cudnn plan was made for the named platform " + named_ +
                                                "; plan on the machine that runs it"}});
    if (ws.size() < workspace_bytes())
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    auto graph = graph_for(t, stream);
    if (!graph) return graph.diagnostics();
    const cudnn::GraphSpec& spec = graph.value()->first;
    std::byte* aux = ws.data() + cudnn_bytes_;
    auto at = [&](std::int64_t offset) -> void* { return offset == AuxLayout::kNone ? nullptr : aux + offset; };

    cudnn::VariantPack pack;
    pack[cudnn::Uid::q] = t.q.data;
    pack[cudnn::Uid::k] = t.k.data;
    pack[cudnn::Uid::v] = t.v.data;
    pack[cudnn::Uid::o] = t.out.data;
    if (spec.stats) pack[cudnn::Uid::stats] = spec.ragged ? at(aux_.stats) : t.lse.data;
    pack[cudnn::Uid::seq_q] = at(aux_.seq_q);
    pack[cudnn::Uid::seq_kv] = at(aux_.seq_kv);
    const cudnn::Uid ragged_uids[5] = {cudnn::Uid::ragged_q, cudnn::Uid::ragged_k, cudnn::Uid::ragged_v,
                                       cudnn::Uid::ragged_o, cudnn::Uid::ragged_stats};
    for (int r = 0; r < 5; ++r) pack[ragged_uids[r]] = at(aux_.ragged[r]);
    pack[cudnn::Uid::page_table_k] = pack[cudnn::Uid::page_table_v] = at(aux_.page_table);
    if (spec.sinks) pack[cudnn::Uid::sinks] = t.sinks.data;
    if (spec.fp8()) {
      auto* scalars = static_cast<float*>(at(aux_.scalars));
      const cudnn::Uid order[8] = {cudnn::Uid::descale_q, cudnn::Uid::descale_k, cudnn::Uid::descale_v,
                                   cudnn::Uid::descale_s, cudnn::Uid::scale_s,   cudnn::Uid::scale_o,
                                   cudnn::Uid::amax_s,    cudnn::Uid::amax_o};
      for (int i = 0; i < 8; ++i) pack[order[i]] = scalars + i;
    }

    if (spec.padded || spec.ragged || spec.paged || spec.fp8())
      if (Diagnostics d = prepare(spec, t, aux, stream); !d.ok()) return d;
    if (Diagnostics d = cudnn::execute(*graph.value()->second.graph, pack, ws.data(), stream); !d.ok()) return d;
    if (spec.padded) return finish(spec, t, at(aux_.stats), static_cast<const std::int32_t*>(at(aux_.bad_pages)), stream);
    return {};
  }

 private:
  using Entry = std::pair<cudnn::GraphSpec, cudnn::BuiltGraph>;

  // The graph for this binding: the planned one when its strides match, else
  // one built once for these strides (outside CUDA-graph capture) and kept.
  Result<const Entry*> graph_for(const AttentionTensors& t, StreamHandle stream) const {
    const cudnn::BindingShape shape = cudnn::binding_shape(problem(), t);
    if (shape == primary_shape_) return &primary_;
    std::lock_guard lock(mutex_);
    for (const auto& [s, entry] : others_)
      if (s == shape) return &entry;
    auto capturing = cudnn::stream_capturing(stream);
    if (!capturing) return capturing.diagnostics();
    const std::string binding = "strides q " + strides(shape.q) + ", out " + strides(shape.o);
    if (capturing.value())
      return diagnose("AK2114", {{"binding", binding},
                                 {"reason", "cannot be built while the stream is being captured into a CUDA graph"}});
    cudnn::GraphSpec spec =
        cudnn::make_graph_spec(problem(), shape, target_.device, target_.sm, primary_.first.stats_ragged);
    auto built = cudnn::find_or_build(spec);
    if (!built) return built.diagnostics();
    if (built.value().workspace_bytes > cudnn_bytes_)
      return diagnose("AK2114",
                      {{"binding", binding},
                       {"reason", "needs " + std::to_string(built.value().workspace_bytes) +
                                      " bytes of cuDNN workspace, the plan reserved " + std::to_string(cudnn_bytes_)}});
    others_.emplace_back(shape, Entry{std::move(spec), built.value()});
    return &others_.back().second;
  }
  static std::string strides(const std::array<std::int64_t, 4>& s) {
    std::string out = "(";
    for (std::size_t i = 0; i < s.size(); ++i) out.append(i ? ", " : "").append(std::to_string(s[i]));
    return out.append(")");
  }

  static cudnn::SequenceSource sequences(const Problem& p, const AttentionTensors& t) {
    cudnn::SequenceSource s;
    s.seqlen_q = p.seqlen_q;
    s.seqlen_k = p.seqlen_k;
    if (p.layout == Layout::thd) {
      s.cu_q = t.cu_seqlens_q.ptr<const std::int32_t>();
      s.cu_q_stride = t.cu_seqlens_q.strides[0];
      s.rows_q = t.q.shape[0];  // the kernels clamp device offsets into the packed rows
      if (!p.paged_kv) {
        s.cu_k = t.cu_seqlens_k.ptr<const std::int32_t>();
        s.cu_k_stride = t.cu_seqlens_k.strides[0];
        s.rows_k = t.k.shape[0];
      }
    }
    if (p.paged_kv) {
      s.seqlens_k = t.seqlens_k.ptr<const std::int32_t>();
      s.seqlens_k_stride = t.seqlens_k.strides[0];
    }
    return s;
  }

  Diagnostics prepare(const cudnn::GraphSpec& spec, const AttentionTensors& t, std::byte* aux,
                      StreamHandle stream) const {
    const Problem& p = problem();
    cudnn::PrepareParams pp;
    pp.batch = p.batch;
    pp.graph_batch = static_cast<int>(spec.batch());
    pp.seq = sequences(p, t);
    auto at = [&](std::int64_t offset) -> void* { return offset == AuxLayout::kNone ? nullptr : aux + offset; };
    pp.seq_q = static_cast<std::int32_t*>(at(aux_.seq_q));
    pp.seq_kv = static_cast<std::int32_t*>(at(aux_.seq_kv));
    if (spec.ragged) {
      const std::int64_t token_strides[5] = {t.q.strides[0], t.k.strides[0], t.v.strides[0], t.out.strides[0],
                                             p.heads_q};  // ragged stats are [total_q, heads_q]
      for (int r = 0; r < 5; ++r) {
        const bool used = r == 4 ? spec.stats_ragged : (r == 1 || r == 2) ? !spec.paged : true;
        pp.ragged[r] = used ? at(aux_.ragged[r]) : nullptr;
        pp.token_stride[r] = token_strides[r];
      }
      pp.offsets_int64 = spec.offsets_int64;
    }
    if (spec.paged) {
      pp.block_table = t.block_table.ptr<const std::int32_t>();
      pp.block_table_strides[0] = t.block_table.strides[0];
      pp.block_table_strides[1] = t.block_table.strides[1];
      pp.table_cols = static_cast<int>(t.block_table.shape[1]);
      pp.max_pages = static_cast<int>(spec.max_pages);
      pp.page_size = static_cast<int>(spec.page_size);
      pp.num_pages = static_cast<int>(t.k.shape[0]);  // entries past the cache are clamped to a page inside it
      pp.page_table = static_cast<std::int32_t*>(at(aux_.page_table));
      pp.bad_pages = static_cast<std::int32_t*>(at(aux_.bad_pages));
    }
    if (spec.fp8()) {
      // P = softmax in [0, 1] is stored as fp8 for the second matmul: scaled to
      // the e4m3 range (448) so small probabilities keep their bits.
      constexpr float kScaleS = 448.0f;
      pp.scalars = static_cast<float*>(at(aux_.scalars));
      const float values[6] = {p.q_descale, p.k_descale, p.v_descale, 1.0f / kScaleS, kScaleS, 1.0f};
      std::copy(values, values + 6, pp.scalar_values);
    }
    return enqueue(pp, stream);
  }

  Diagnostics finish(const cudnn::GraphSpec& spec, const AttentionTensors& t, void* stats,
                     const std::int32_t* bad_pages, StreamHandle stream) const {
    const Problem& p = problem();
    cudnn::FinishParams fp;
    fp.bad_pages = bad_pages;
    fp.batch = p.batch;
    fp.heads_q = p.heads_q;
    fp.head_dim_v = p.head_dim_v;
    fp.layout = p.layout;
    fp.seq = sequences(p, t);
    fp.window_left = spec.window_left;
    fp.window_right = spec.window_right;
    fp.out = t.out.data;
    for (int i = 0; i < 4; ++i) fp.out_strides[i] = t.out.strides[i];
    if (p.return_lse) {
      fp.lse = t.lse.ptr<float>();
      for (int i = 0; i < 3; ++i) fp.lse_strides[i] = t.lse.strides[i];
      if (spec.ragged) {
        fp.stats = static_cast<const float*>(stats);
        fp.stats_ragged = spec.stats_ragged;
        for (int i = 0; i < 3; ++i) fp.stats_strides[i] = spec.stats_dims.stride[i];
      }
    }
    if (p.has_sinks) {
      fp.sinks = t.sinks.ptr<const float>();
      fp.sinks_stride = t.sinks.strides[0];
    }
    return enqueue(fp, stream);
  }


  AuxLayout aux_;
  Target target_;
  Entry primary_;  // the graph for the contiguous binding, built by plan()
  cudnn::BindingShape primary_shape_;
  std::int64_t cudnn_bytes_ = 0;
  std::string named_;
  mutable std::mutex mutex_;
  mutable std::deque<std::pair<cudnn::BindingShape, Entry>> others_;  // deque: entries never move
};

class CudnnBackend final : public Backend {
 public:
  CudnnBackend() : caps_(cudnn_capabilities()) {}
  std::string_view name() const override { return "cudnn"; }
  std::string_view description() const override {
    return "cuDNN 9 fused SDPA forward through the cuDNN frontend's graph API (graphs planned once per shape and "
           "cached); fp16/bf16 (fp8 e4m3 on Blackwell), causal and windows bottom-right, GQA, varlen, paged KV, "
           "sinks, LSE";
  }
  const Capabilities& capabilities() const override { return caps_; }

  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = check_capabilities(name(), caps_, p, platform);
    if (platform.kind != PlatformKind::cuda) return out;
    if (platform.detected && !platform.has_cudnn) return with_load_failure(out);
    out.append(cudnn::support_reasons(p, platform.sm, platform.cudnn_version));
    // On this machine cuDNN answers for itself: the graph is built (and cached) now.
    if (out.empty() && platform.detected) {
      auto target = current_target();
      if (!target) return target.diagnostics();
      auto planned = plan_graph(p, target.value());
      if (!planned) out.append(planned.diagnostics());
    }
    return out;
  }

  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    Diagnostics why = validate_problem(p);
    why.append(check(p, platform));
    if (!why.ok()) return why;
    if (!caps_.built)
      return diagnose("AK2111", {{"backend", "cudnn"}, {"detail", " (no cuDNN frontend in this build)"}});
    if (!platform.detected) return std::unique_ptr<Plan>(std::make_unique<CudnnPlan>(p, platform.label()));
    auto target = current_target();
    if (!target) return target.diagnostics();
    auto planned = plan_graph(p, target.value());  // built by check(): a cache hit
    if (!planned) return planned.diagnostics();
    return std::unique_ptr<Plan>(std::make_unique<CudnnPlan>(p, std::move(planned.value()), target.value()));
  }

 private:
  // The generic AK2110 says cuDNN is missing; the loader knows where it looked.
  static Diagnostics with_load_failure(const Diagnostics& generic) {
    Diagnostics out;
    const auto& lib = cudnn_library();
    for (const Diagnostic& d : generic)
      if (d.code != "AK2110" || lib) out.add(d);
    if (!lib) out.append(lib.diagnostics());
    return out;
  }

  Capabilities caps_;
};

}  // namespace

std::unique_ptr<Backend> make_cudnn_backend() { return std::make_unique<CudnnBackend>(); }

}  // namespace attnkit
