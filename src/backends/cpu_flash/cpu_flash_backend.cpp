// cpu_flash host glue: capabilities, plan (path choice, workspace sizing) and
// run (binding checks, then OpenMP over (q tile, batch, head)).
#include "attnkit/backends/cpu_flash.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/host_memory.hpp"
#include "backends/cpu_flash/flash_dispatch.hpp"

namespace attnkit {
namespace cpu_flash {

#if defined(ATTNKIT_CPU_FLASH_BF16_DOT)
const kernels::cpu::Bf16DotOps* avx512bf16_dot_ops_unchecked();  // bf16_dot_avx512.cpp
#endif

const kernels::cpu::Bf16DotOps* bf16_dot_ops() {
#if defined(ATTNKIT_CPU_FLASH_BF16_DOT) && (defined(__GNUC__) || defined(__clang__))
  static const bool cpu_has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return cpu_has ? avx512bf16_dot_ops_unchecked() : nullptr;
#else
  return nullptr;
#endif
}

}  // namespace cpu_flash

namespace {

namespace kc = kernels::cpu;
using kc::FlashTraits;

std::optional<kc::Elem> elem_of(DType t) {
  switch (t) {
    case DType::f32: return kc::Elem::f32;
    case DType::f16: return kc::Elem::f16;
    case DType::bf16: return kc::Elem::bf16;
    default: return std::nullopt;
  }
}

bool avx512_bf16_available() {
  return cpu_flash::highway_path_available(CpuIsa::avx512) && cpu_flash::bf16_dot_ops() != nullptr;
}

Capabilities cpu_flash_capabilities() {
  Capabilities c;
  c.platforms = {PlatformKind::cpu};
  c.dtypes = {DType::f32, DType::f16, DType::bf16};
  c.max_head_dim = 512;
  c.masks = {MaskKind::none, MaskKind::causal, MaskKind::sliding_window, MaskKind::custom};
  c.block_sparse = true;  // listed KV tiles only: unlisted ones are never read
  c.layouts = {Layout::bshd, Layout::bhsd, Layout::thd};
  c.paged_kv = true;  // gathered per (sequence, kv head) into the thread's workspace
  c.diagonal_offsets = true;
  c.skip_softmax = true;  // request-scoped skip-softmax in run_at (the CPU semantics of fa's)
  return c;
}

class CpuFlashPlan final : public Plan {
 public:
  CpuFlashPlan(const Problem& p, kc::FlashArgs args, cpu_flash::FlashTileFn fn, int threads)
      : Plan(p), args_(args), fn_(fn), threads_(threads),
        per_thread_floats_(kc::workspace_layout(args.dqk, args.dv).total),
        // Paged caches: one sequence's K and V rows of a kv head, made contiguous.
        gather_bytes_(p.paged_kv ? round_up(static_cast<std::size_t>(p.seqlen_k) * (args.dqk + args.dv) *
                                                dtype_size(p.dtype))
                                 : 0),
        per_thread_bytes_(round_up(per_thread_floats_ * sizeof(float)) + gather_bytes_) {}

  std::size_t workspace_bytes() const override {
    return static_cast<std::size_t>(threads_) * per_thread_bytes_ + kAlign;
  }

  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    return execute(t, ws, args_, std::nullopt, nullptr);
  }

  // Request-scoped skip-softmax from its start step on (docs/sparse.md); the
  // other steps, and calls without a step, run exactly run().
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws, StreamHandle) const override {
    const std::optional<SkipSoftmaxParams>& skip = where.skip_softmax;
    if (!skip || where.step < 0 || where.step < skip->start_step) return execute(t, ws, args_, std::nullopt, nullptr);
    if (problem().block_sparse)
      return diagnose("AK2109", {{"backend", "cpu_flash"}, {"feature", "skip-softmax with block-sparse lists"}});
    if (skip->block_k < 2 || skip->block_k > FlashTraits::kMaxBlockK || skip->block_k % 2 != 0 ||
        !(skip->threshold_scale_factor > 0.0))
      return diagnose("AK3103", {{"key", "skip-softmax block_k / threshold_scale_factor"},
                                 {"value", std::to_string(skip->block_k) + " / " +
                                               std::to_string(skip->threshold_scale_factor)},
                                 {"range", "an even block_k in [2, 128] and a factor > 0"}});
    kc::FlashArgs a = args_;
    a.skip_softmax = true;
    a.kv_tile = skip->block_k;
    return execute(t, ws, a, skip->threshold_scale_factor, where.stats);
  }

 private:
  // One call with `args`; `skip_factor` set: skip-softmax with threshold
  // skip_factor / (keys of the sequence), counted into `stats`.
  Diagnostics execute(const AttentionTensors& t, Workspace ws, const kc::FlashArgs& args,
                      std::optional<double> skip_factor, SparsityStats* stats) const {
    const Problem& p = problem();
    if (ws.size() < workspace_bytes() || (ws.data() == nullptr && workspace_bytes() > 0))
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    Diagnostics why = validate_binding(p, t, {DeviceKind::cpu, 0});
    if (!why.ok()) return why;
    // A vectorised, threaded check first; the exact (slower) scan only names
    // the culprit once something non-finite is known to be there.
    const Magnitudes mag = input_magnitudes(t);
    if (!mag.finite) {
      why = scan_nonfinite_inputs(p, t);
      if (!why.ok()) return why;
    }
    why = check_fp32_range(mag);
    if (!why.ok()) return why;

    auto addr = reinterpret_cast<std::uintptr_t>(ws.data());
    std::byte* base = reinterpret_cast<std::byte*>((addr + kAlign - 1) / kAlign * kAlign);
    const std::int64_t tiles = (std::int64_t{p.seqlen_q} + FlashTraits::kBlockQ - 1) / FlashTraits::kBlockQ;
    const std::int64_t heads = static_cast<std::int64_t>(p.batch) * p.heads_q;
    const std::int64_t items = heads * tiles;
    std::int64_t decided = 0, skipped = 0;
#pragma omp parallel num_threads(threads_) reduction(+ : decided, skipped)
    {
      std::int64_t counts[2] = {0, 0};  // this thread's skip-softmax (decided, skipped)
      std::byte* thread_ws = base + static_cast<std::size_t>(omp_get_thread_num()) * per_thread_bytes_;
      float* mine = reinterpret_cast<float*>(thread_ws);
      std::byte* gathered = thread_ws + round_up(per_thread_floats_ * sizeof(float));
      std::int64_t gathered_for = -1;  // (b, kv head) whose rows `gathered` holds
      // Head by head, so that consecutive items (on every thread) stream the
      // same K and V rows: one head's K/V (4 MiB at s4k d128) stays in L3,
      // whereas visiting all heads per q tile streams every head's K/V from
      // DRAM. Within a head, last q tiles first: under a causal mask they
      // carry the most work, and the light ones balance the threads at the end.
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t it = 0; it < items; ++it) {
        const int tile = static_cast<int>(tiles - 1 - it % tiles);
        const std::int64_t head = it / tiles;
        const int b = static_cast<int>(head / p.heads_q);
        const int hq = static_cast<int>(head % p.heads_q);
        const SequenceSpan span = host_sequence_span(p, t, b);
        const int q0 = tile * FlashTraits::kBlockQ;
        if (q0 >= span.q_len) continue;
        kc::HeadSlice h = slice(p, t, b, hq, span);
        if (skip_factor) {
          h.skip_log2_threshold = static_cast<float>(std::log2(*skip_factor / std::max(1, span.k_len)));
          h.skip_counts = counts;
        }
        if (p.paged_kv) {
          const int hkv = hq / p.gqa_ratio();
          const std::int64_t key = static_cast<std::int64_t>(b) * p.heads_kv + hkv;
          if (key != gathered_for) gather_pages(p, t, b, hkv, span.k_len, gathered);
          gathered_for = key;
          h.k = gathered;
          h.k_stride = p.head_dim_qk;
          h.v = gathered + static_cast<std::size_t>(span.k_len) * p.head_dim_qk * dtype_size(p.dtype);
          h.v_stride = p.head_dim_v;
        }
        fn_(args, h, q0, mine);
      }
      decided += counts[0];
      skipped += counts[1];
    }
    if (stats) {
      stats->blocks += decided;
      stats->blocks_skipped += skipped;
    }
    // Finite inputs can still overflow fp32 scores (|q.k| * scale past 3.4e38);
    // such a result is refused, not returned.
    if (max_bits(t.out, args_.out) >= kc::non_finite_bits(args_.out) || (p.return_lse && !lse_valid(t.lse)))
      return scan_nonfinite_outputs(p, t, "cpu_flash");
    return {};
  }

  static constexpr std::size_t kAlign = 64;

  static std::size_t round_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

  // Copies the k_len cached rows of (sequence b, kv head hkv) into `dst`: K rows
  // [k_len, dqk] then V rows [k_len, dv], each contiguous. Row j lives in page
  // block_table[b, j / page_size] at slot j % page_size.
  static void gather_pages(const Problem& p, const AttentionTensors& t, int b, int hkv, int k_len, std::byte* dst) {
    const int P = p.paged_kv->page_size;
    const std::size_t elem = dtype_size(p.dtype);
    const auto* table = t.block_table.ptr<const std::int32_t>() + b * t.block_table.strides[0];
    std::byte* k_dst = dst;
    std::byte* v_dst = dst + static_cast<std::size_t>(k_len) * p.head_dim_qk * elem;
    for (int j = 0; j < k_len; ++j) {
      const std::int64_t page = table[(j / P) * t.block_table.strides[1]];
      const std::int64_t k_off = page * t.k.strides[0] + (j % P) * t.k.strides[1] + hkv * t.k.strides[2];
      const std::int64_t v_off = page * t.v.strides[0] + (j % P) * t.v.strides[1] + hkv * t.v.strides[2];
      std::memcpy(k_dst + static_cast<std::size_t>(j) * p.head_dim_qk * elem, t.k.bytes() + k_off * elem,
                  p.head_dim_qk * elem);
      std::memcpy(v_dst + static_cast<std::size_t>(j) * p.head_dim_v * elem, t.v.bytes() + v_off * elem,
                  p.head_dim_v * elem);
    }
  }

  // The largest |x| of q, k and v (of a paged cache, only the rows the call
  // reads: unused pages and slots may hold anything), and whether q, k, v and
  // sinks are free of NaN/Inf.
  struct Magnitudes {
    double q = 0, k = 0, v = 0;
    bool finite = true;
  };
  Magnitudes input_magnitudes(const AttentionTensors& t) const {
    const kc::Elem e = args_.in;
    std::uint32_t q = max_bits(t.q, e), k = 0, v = 0;
    if (problem().paged_kv) {
      read_pages_max_bits(t, k, v);
    } else {
      k = max_bits(t.k, e);
      v = max_bits(t.v, e);
    }
    Magnitudes m;
    const std::uint32_t inf = kc::non_finite_bits(e);
    m.finite = q < inf && k < inf && v < inf;
    m.q = magnitude(q, e), m.k = magnitude(k, e), m.v = magnitude(v, e);
    if (problem().has_sinks)
      for (std::int64_t h = 0; h < t.sinks.numel(); ++h)
        if (!std::isfinite(t.sinks.ptr<const float>()[h * t.sinks.strides[0]])) m.finite = false;
    return m;
  }

  // fp32 scores and sums stay finite when |s| <= mul * dqk * max|q| * max|k|
  // (mul: the prescale of q or of the bf16 dot products, 1 beside it) and
  // |O^T| <= seqlen_k * max|v| are below 2^126 (a 4x margin under FLT_MAX for
  // the rounding of the sums); inputs that could pass it are refused (the fp64
  // reference computes them exactly) instead of returning a result whose
  // overflowed scores Max and Exp2 dropped silently.
  Diagnostics check_fp32_range(const Magnitudes& m) const {
    constexpr double kLimit = 0x1p126;
    const double mul = std::max(1.0, static_cast<double>(std::fabs(args_.score_mul)));
    const double scores = mul * args_.dqk * m.q * m.k;
    const double sums = static_cast<double>(problem().seqlen_k) * m.v * args_.out_mul;
    if (scores < kLimit && sums < kLimit) return {};
    return diagnose("AK1114", {{"backend", "cpu_flash"},
                               {"reason", scores >= kLimit
                                              ? fmt::format("|q| up to {:.3g} and |k| up to {:.3g} over head dim {} give "
                                                            "scores up to {:.3g}, past fp32's range",
                                                            m.q, m.k, args_.dqk, scores)
                                              : fmt::format("|v| up to {:.3g} summed over up to {} keys passes fp32's range",
                                                            m.v, problem().seqlen_k)}});
  }

  // |x| of the sign-cleared bit pattern `bits` of element type e.
  static double magnitude(std::uint32_t bits, kc::Elem e) {
    switch (e) {
      case kc::Elem::f32: return bits_float(bits);
      case kc::Elem::bf16: return bf16_to_float(static_cast<std::uint16_t>(bits));
      case kc::Elem::f16: return f16_to_float(static_cast<std::uint16_t>(bits));
    }
    return 0.0;
  }

  // max over a tensor of element type e of its sign-cleared bit patterns (the
  // order of those is the order of |x|; NaN/Inf above every finite value).
  // Walks it as rows of contiguous elements (the head dim is unit-stride;
  // fully contiguous tensors are one run), split over the plan's threads.
  std::uint32_t max_bits(const TensorView& tv, kc::Elem e) const {
    if (tv.numel() == 0) return 0;
    const int r = tv.rank;
    const bool contiguous = tv.is_contiguous();
    const std::int64_t run = contiguous ? tv.numel() : tv.shape[r - 1];
    const std::int64_t runs = contiguous ? 1 : tv.numel() / run;
    // Split one long run into chunks so every thread gets a share.
    const std::int64_t chunk = contiguous ? std::max<std::int64_t>(1 << 16, run / (4 * threads_) + 1) : run;
    const std::int64_t pieces = contiguous ? (run + chunk - 1) / chunk : runs;
    const std::size_t elem = dtype_size(tv.dtype);
    std::uint32_t worst = 0;
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(max : worst)
    for (std::int64_t i = 0; i < pieces; ++i) {
      std::int64_t offset = 0, n = run;
      if (contiguous) {
        offset = i * chunk;
        n = std::min(chunk, run - offset);
      } else {
        std::int64_t rest = i;  // row index over the leading dims
        for (int d = r - 2; d >= 0; --d) {
          offset += rest % tv.shape[d] * tv.strides[d];
          rest /= tv.shape[d];
        }
      }
      worst = std::max(worst, cpu_flash::max_magnitude_bits(tv.bytes() + offset * static_cast<std::int64_t>(elem), e, n));
    }
    return worst;
  }

  // max_bits over the cached rows the call reads: keys j < seqlens_k[b] of every kv head.
  void read_pages_max_bits(const AttentionTensors& t, std::uint32_t& k_bits, std::uint32_t& v_bits) const {
    const Problem& p = problem();
    const int P = p.paged_kv->page_size;
    const std::int64_t elem = static_cast<std::int64_t>(dtype_size(p.dtype));
    std::uint32_t k_worst = 0, v_worst = 0;
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 1) reduction(max : k_worst, v_worst)
    for (int b = 0; b < p.batch; ++b) {
      const SequenceSpan span = host_sequence_span(p, t, b);
      const auto* table = t.block_table.ptr<const std::int32_t>() + b * t.block_table.strides[0];
      for (int j = 0; j < span.k_len; ++j) {
        const std::int64_t page = table[(j / P) * t.block_table.strides[1]];
        for (int h = 0; h < p.heads_kv; ++h) {
          const std::int64_t k_off = page * t.k.strides[0] + (j % P) * t.k.strides[1] + h * t.k.strides[2];
          const std::int64_t v_off = page * t.v.strides[0] + (j % P) * t.v.strides[1] + h * t.v.strides[2];
          k_worst = std::max(k_worst, cpu_flash::max_magnitude_bits(t.k.bytes() + k_off * elem, args_.in, p.head_dim_qk));
          v_worst = std::max(v_worst, cpu_flash::max_magnitude_bits(t.v.bytes() + v_off * elem, args_.in, p.head_dim_v));
        }
      }
    }
    k_bits = k_worst;
    v_bits = v_worst;
  }

  // LSE values are finite or -inf (a row that sees no key).
  static bool lse_valid(const TensorView& lse) {
    const int r = lse.rank;
    for (std::int64_t i = 0; i < lse.numel(); ++i) {
      std::int64_t off = 0, rest = i;
      for (int d = r - 1; d >= 0; --d) {
        off += rest % lse.shape[d] * lse.strides[d];
        rest /= lse.shape[d];
      }
      const float x = lse.ptr<const float>()[off];
      if (!(std::isfinite(x) || x == -INFINITY)) return false;
    }
    return true;
  }

  static kc::HeadSlice slice(const Problem& p, const AttentionTensors& t, int b, int hq, const SequenceSpan& span) {
    kc::HeadSlice h;
    const int hkv = hq / p.gqa_ratio();
    const auto rows = [&](const TensorView& tv, int head, std::int64_t token_offset, std::int64_t& stride) {
      const HeadRows r = head_rows(p.layout, tv.strides.data(), b, head, token_offset);
      stride = r.row_stride;
      return static_cast<void*>(tv.bytes() + r.offset * static_cast<std::int64_t>(dtype_size(tv.dtype)));
    };
    h.q = rows(t.q, hq, span.q_offset, h.q_stride);
    h.k = rows(t.k, hkv, span.k_offset, h.k_stride);
    h.v = rows(t.v, hkv, span.k_offset, h.v_stride);
    h.out = rows(t.out, hq, span.q_offset, h.out_stride);
    if (p.return_lse) {
      const auto& s = t.lse.strides;
      h.lse = t.lse.ptr<float>() +
              (p.layout == Layout::thd ? hq * s[0] + span.q_offset * s[1] : b * s[0] + hq * s[1]);
      h.lse_stride = p.layout == Layout::thd ? s[1] : s[2];
    }
    if (p.has_sinks) h.sink = t.sinks.ptr<const float>()[hq * t.sinks.strides[0]];
    if (p.mask == MaskKind::custom) {
      const TensorView& mask = t.custom_mask;
      h.mask = mask.ptr<const std::uint8_t>() + b * mask.strides[0] + hq * mask.strides[1];
      h.mask_si = mask.strides[2];
      h.mask_sj = mask.strides[3];
    }
    if (p.block_sparse) {
      const BlockSparse& bs = *p.block_sparse;
      const int nqb = num_blocks(p.seqlen_q, bs.block_q);
      h.block_offsets = t.block_offsets.ptr<const std::int32_t>() + block_sparse_row(bs.batch, bs.heads, nqb, b, hq, 0);
      h.block_indices = t.block_indices.ptr<const std::int32_t>();
      h.block_nnz = t.block_indices.numel();
    }
    h.sq = span.q_len;
    h.sk = span.k_len;
    h.diagonal = span.diagonal;
    return h;
  }

  kc::FlashArgs args_;
  cpu_flash::FlashTileFn fn_;
  int threads_;
  std::size_t per_thread_floats_;
  std::size_t gather_bytes_;
  std::size_t per_thread_bytes_;
};

class CpuFlashBackend final : public Backend {
 public:
  explicit CpuFlashBackend(CpuFlashOptions options) : options_(options) {}

  std::string_view name() const override { return "cpu_flash"; }
  std::string_view description() const override {
    return "tiled online-softmax attention on the CPU: Highway SIMD with run-time dispatch (AVX-512, AVX2, "
           "emulated 128-bit), AVX512_BF16 dot products, OpenMP threads; fp32/fp16/bf16";
  }
  const Capabilities& capabilities() const override { return caps_; }

  Diagnostics check(const Problem& p, const Platform& platform) const override {
    Diagnostics out = Backend::check(p, platform);
    // One storage type for q, k and v, and an fp32/fp16/bf16 output.
    if (p.k_dtype() != p.dtype && caps_.dtypes.contains(p.k_dtype()))
      out.add("AK2104", {{"backend", "cpu_flash"}, {"role", "k/v"}, {"dtype", std::string(dtype_name(p.k_dtype()))},
                         {"supported", "the dtype of q (" + std::string(dtype_name(p.dtype)) + ")"}});
    if (!elem_of(p.out_dtype()))
      out.add("AK2104", {{"backend", "cpu_flash"}, {"role", "out"}, {"dtype", std::string(dtype_name(p.out_dtype()))},
                         {"supported", "fp32, fp16, bf16"}});
    return out;
  }

  Result<std::unique_ptr<Plan>> plan(const Problem& p, const Platform& platform) const override {
    Diagnostics why = validate_problem(p);
    why.append(check(p, platform));
    if (!why.ok()) return why;
    const cpu_flash::FlashTileFn fn = cpu_flash::flash_tile_fn(options_.isa);
    const bool bf16_ok = options_.isa != CpuIsa::avx512_bf16 || avx512_bf16_available();
    if (fn == nullptr || !bf16_ok)
      return diagnose("AK2111", {{"backend", "cpu_flash"},
                                 {"detail", " (the forced ISA path " + std::string(cpu_isa_name(options_.isa)) +
                                                " is not compiled or this CPU lacks it)"}});
    kc::FlashArgs a;
    a.dqk = p.head_dim_qk;
    a.dv = p.head_dim_v;
    a.in = *elem_of(p.dtype);
    a.out = *elem_of(p.out_dtype());
    // Scores in log2 units (see FlashArgs): fold scale, log2(e) and the descales.
    const float scale = p.softmax_scale() * p.q_descale * p.k_descale;
    if (p.softcap > 0.0f) {
      a.score_mul = scale / p.softcap;
      a.softcap_log2 = p.softcap * FlashTraits::kLog2e;
    } else {
      a.score_mul = scale * FlashTraits::kLog2e;
    }
    a.out_mul = p.v_descale;
    const Window w = p.effective_window();
    a.window_left = w.left;
    a.window_right = w.right;
    a.extra = p.mask == MaskKind::custom ? kc::ExtraMask::element : kc::ExtraMask::none;
    if (p.block_sparse) {
      a.block_q = p.block_sparse->block_q;
      a.block_k = p.block_sparse->block_k;
    }
    a.has_sinks = p.has_sinks;
    const bool want_dot = options_.isa == CpuIsa::avx512_bf16 ||
                          (options_.isa == CpuIsa::best && cpu_flash_best_isa() == CpuIsa::avx512_bf16);
    if (want_dot && a.in == kc::Elem::bf16 && a.dqk % 2 == 0 && a.dv % 2 == 0) a.dot = cpu_flash::bf16_dot_ops();
    const int threads = options_.threads > 0 ? options_.threads : host_threads();
    auto plan = std::make_unique<CpuFlashPlan>(p, a, fn, threads);
    why = check_host_allocation("cpu_flash's workspace", static_cast<std::int64_t>(plan->workspace_bytes()));
    if (!why.ok()) return why;
    return std::unique_ptr<Plan>(std::move(plan));
  }

 private:
  CpuFlashOptions options_;
  Capabilities caps_ = cpu_flash_capabilities();
};

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::best: return "best";
    case CpuIsa::emu128: return "emu128";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx512_bf16: return "avx512_bf16";
  }
  return "?";
}

std::vector<CpuIsa> cpu_flash_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::emu128, CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_flash::highway_path_available(isa)) out.push_back(isa);
  if (avx512_bf16_available()) out.push_back(CpuIsa::avx512_bf16);
  return out;
}

CpuIsa cpu_flash_best_isa() {
  const std::string target = cpu_flash::dispatched_target_name();
  if (target == "AVX3" || target == "AVX3_DL")
    return avx512_bf16_available() ? CpuIsa::avx512_bf16 : CpuIsa::avx512;
  if (target == "AVX2") return CpuIsa::avx2;
  return CpuIsa::emu128;
}

std::unique_ptr<Backend> make_cpu_flash_backend(CpuFlashOptions options) {
  return std::make_unique<CpuFlashBackend>(options);
}

}  // namespace attnkit
