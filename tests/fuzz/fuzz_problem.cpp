// libFuzzer target: Problem validation, then binding validation and both CPU
// backends. The input chooses every field of a Problem (sizes as any int, or
// small; every dtype, mask, window, scale, paged or packed layout). A valid
// small problem gets random data, then the input mutates the binding the way
// a caller's mistake would (index tensors narrowed, shortened, filled with
// any values; inputs shrunk, given another rank, broadcast) - inside the
// buffers, which hold exactly what they claim, so ASan sees any read past
// them. Whatever validates runs on reference and cpu_flash, and the two must
// agree (a differential check: a wrong result is a finding).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "attnkit/backends/registry.hpp"
#include "attnkit/backends/reference.hpp"
#include "attnkit/core/error_stats.hpp"
#include "attnkit/core/host_tensor.hpp"
#include "attnkit/core/mask.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

namespace {

// Any int half the time (validation must refuse it), else a small one.
int size_field(FuzzedDataProvider& f, int lo, int hi) {
  return f.ConsumeBool() ? f.ConsumeIntegral<int>() : f.ConsumeIntegralInRange(lo, hi);
}

// A block size: any int half the time, else 0, 16 or 32.
int block_field(FuzzedDataProvider& f) {
  return f.ConsumeBool() ? f.ConsumeIntegral<int>() : 16 * f.ConsumeIntegralInRange(0, 2);
}

float scale_field(FuzzedDataProvider& f) {
  switch (f.ConsumeIntegralInRange(0, 3)) {
    case 0: return f.ConsumeFloatingPoint<float>();  // anything: NaN, inf, denormals, huge
    case 1: return f.ConsumeFloatingPointInRange(0.01f, 2.0f);
    case 2: return 0.0f;
    default: return f.PickValueInArray({1e-6f, 1e6f, 1e-7f, 2e6f, -0.0f});
  }
}

Problem make_problem(FuzzedDataProvider& f) {
  Problem p;
  p.layout = f.PickValueInArray({Layout::bshd, Layout::bhsd, Layout::thd});
  p.batch = size_field(f, 1, 3);
  p.seqlen_q = size_field(f, 0, 40);
  p.seqlen_k = size_field(f, 0, 70);
  p.heads_kv = size_field(f, 1, 2);
  const std::int64_t grouped = std::int64_t{p.heads_kv} * f.ConsumeIntegralInRange(1, 3);  // a GQA multiple
  p.heads_q = f.ConsumeBool() ? size_field(f, 1, 4) : static_cast<int>(std::clamp<std::int64_t>(grouped, INT_MIN, INT_MAX));
  p.head_dim_qk = size_field(f, 1, 48);
  p.head_dim_v = f.ConsumeBool() ? p.head_dim_qk : size_field(f, 1, 48);
  p.dtype = f.PickValueInArray(kAllDTypes);
  if (f.ConsumeBool()) p.dtype = f.PickValueInArray({DType::f32, DType::f16, DType::bf16});
  if (f.ConsumeIntegralInRange(0, 7) == 0) p.kv_dtype = f.PickValueInArray(kAllDTypes);
  if (f.ConsumeIntegralInRange(0, 7) == 0) p.out_dtype_override = f.PickValueInArray(kAllDTypes);
  p.mask = f.PickValueInArray(kAllMaskKinds);
  p.window = {size_field(f, -2, 40), size_field(f, -2, 40)};
  // Block sparsity composes with every mask: lists shared (1) or per sequence / head.
  if (f.ConsumeBool())
    p.block_sparse = BlockSparse{block_field(f), block_field(f),
                                 f.ConsumeBool() ? 1 : size_field(f, 1, 4), f.ConsumeBool() ? 1 : size_field(f, 1, 8)};
  if (f.ConsumeIntegralInRange(0, 7) == 0)
    p.video = VideoGrid{size_field(f, 0, 4), size_field(f, 0, 4), size_field(f, 0, 4)};
  if (f.ConsumeBool()) p.softcap = scale_field(f);
  if (f.ConsumeBool()) p.scale = scale_field(f);
  p.has_sinks = f.ConsumeBool();
  p.return_lse = f.ConsumeBool();
  if (f.ConsumeIntegralInRange(0, 3) == 0) p.paged_kv = PagedKv{size_field(f, 1, 16)};
  if (f.ConsumeIntegralInRange(0, 7) == 0) p.q_descale = scale_field(f);
  return p;
}

// Index tensors move to exact-size heap buffers: ASan reports any read past them.
struct ExactCopies {
  std::vector<std::unique_ptr<std::vector<std::byte>>> owned;
  void move(TensorView& v) {
    if (v.data == nullptr) return;
    const std::size_t bytes = static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype);
    // An empty tensor keeps a non-null (one-byte) buffer: null means "absent".
    owned.push_back(std::make_unique<std::vector<std::byte>>(std::max<std::size_t>(bytes, 1)));
    if (bytes > 0) std::memcpy(owned.back()->data(), v.data, bytes);
    v.data = owned.back()->data();
  }
};

// A caller's mistake, inside the buffers: narrower dtypes, fewer elements,
// another rank, broadcast inputs, any index values.
void mutate(FuzzedDataProvider& f, AttentionTensors& t) {
  // Inputs only: both backends then see the same binding but for out's dtype.
  TensorView* all[] = {&t.q,          &t.k,           &t.v,           &t.sinks,        &t.cu_seqlens_q,
                       &t.cu_seqlens_k, &t.block_table, &t.seqlens_k, &t.block_offsets, &t.block_indices};
  const int n = f.ConsumeIntegralInRange(0, 3);
  for (int i = 0; i < n; ++i) {
    TensorView& v = *all[f.ConsumeIntegralInRange<std::size_t>(0, std::size(all) - 1)];
    if (v.data == nullptr || v.rank == 0) continue;
    switch (f.ConsumeIntegralInRange(0, 5)) {
      case 0:  // a dtype no wider than the real one
        for (DType d = f.PickValueInArray(kAllDTypes); dtype_size(d) <= dtype_size(v.dtype);) {
          v.dtype = d;
          break;
        }
        break;
      case 1: {  // fewer elements along one dim
        const int d = f.ConsumeIntegralInRange(0, v.rank - 1);
        v.shape[d] = f.ConsumeIntegralInRange<std::int64_t>(0, v.shape[d]);
        break;
      }
      case 2:  // a leading dim of 1 (same elements, another rank)
        if (v.rank < kMaxRank) {
          for (int d = v.rank; d > 0; --d) v.shape[d] = v.shape[d - 1], v.strides[d] = v.strides[d - 1];
          v.shape[0] = 1, v.strides[0] = 1, ++v.rank;
        }
        break;
      case 3:  // broadcast a dim
        v.strides[f.ConsumeIntegralInRange(0, v.rank - 1)] = 0;
        break;
      case 4:  // any values in an index tensor
        if (v.dtype == DType::i32 && v.numel() > 0 && v.is_contiguous())
          v.ptr<std::int32_t>()[f.ConsumeIntegralInRange<std::int64_t>(0, v.numel() - 1)] = f.ConsumeIntegral<std::int32_t>();
        break;
      default:  // a NaN or an infinity anywhere in a float tensor
        if (is_floating(v.dtype) && v.numel() > 0 && v.is_contiguous())
          store_from_double(v.data, v.dtype, f.ConsumeIntegralInRange<std::int64_t>(0, v.numel() - 1),
                            f.ConsumeBool() ? NAN : -INFINITY);
        break;
    }
  }
}

double max_abs(const TensorView& v) {
  double m = 0.0;
  if (v.is_contiguous())
    for (std::int64_t i = 0; i < v.numel(); ++i) m = std::max(m, std::fabs(load_as_double(v.data, v.dtype, i)));
  return m;
}

bool small(const Problem& p) {
  const double b = p.batch, h = std::max(p.heads_q, p.heads_kv), s = std::max(p.seqlen_q, p.seqlen_k),
               d = std::max(p.head_dim_qk, p.head_dim_v);
  // Pages hold page_size rows each, used or not: a huge page is a huge (valid) allocation.
  return b * h * s * d <= (1 << 15) && b <= 4 && h <= 8 && (!p.paged_kv || p.paged_kv->page_size <= 64);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  const Problem p = make_problem(f);
  const Diagnostics why = validate_problem(p);
  fuzz::require_catalogued(why, "validate_problem");
  (void)p.summary();
  (void)p.flops();
  if (!why.ok()) return 0;
  // Every visible range of every row stays inside [0, seqlen_k].
  const Window w = p.effective_window();
  for (const int i : {0, p.seqlen_q / 2, p.seqlen_q - 1}) {
    if (i < 0) continue;
    const KeyRange r = visible_keys(i, p.seqlen_q, p.seqlen_k, w.left, w.right);
    if (r.lo < 0 || r.hi < r.lo || r.hi > p.seqlen_k) {
      std::fprintf(stderr, "visible_keys(%d) = [%d, %d) for %s\n", i, r.lo, r.hi, p.summary().c_str());
      std::abort();
    }
  }
  if (!small(p)) return 0;
  ProblemDataOptions o;
  o.seed = f.ConsumeIntegral<std::uint64_t>();
  if (p.layout == Layout::thd || p.paged_kv)
    for (int b = 0; b < p.batch; ++b) {
      o.q_lens.push_back(p.layout == Layout::thd ? f.ConsumeIntegralInRange(0, p.seqlen_q) : p.seqlen_q);
      o.k_lens.push_back(f.ConsumeIntegralInRange(0, p.seqlen_k));
    }
  auto made = HostProblemData::create(p, o);
  if (!made) {
    fuzz::require_catalogued(made.diagnostics(), "HostProblemData::create");
    return 0;
  }
  AttentionTensors t = made->tensors();
  ExactCopies copies;
  for (TensorView* index : {&t.cu_seqlens_q, &t.cu_seqlens_k, &t.block_table, &t.seqlens_k, &t.block_offsets,
                            &t.block_indices})
    copies.move(*index);
  mutate(f, t);
  // The reference into an fp64 output, cpu_flash into the problem's own.
  Problem ref_p = p;
  ref_p.out_dtype_override = DType::f64;
  HostTensor ref_out = made->make_output(DType::f64);
  AttentionTensors ref_t = t;
  ref_t.out = ref_out.view();
  const Diagnostics ref_ran = reference_attention(ref_p, ref_t);
  fuzz::require_catalogued(ref_ran, "reference_attention");
  const Backend& flash = *default_registry().find("cpu_flash");
  auto plan = flash.plan(p, detect_cpu_platform());
  if (!plan) {
    fuzz::require_catalogued(plan.diagnostics(), "cpu_flash plan");
    return 0;
  }
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  const Diagnostics ran = (*plan)->run(t, ws, nullptr);
  fuzz::require_catalogued(ran, "cpu_flash run");
  if (ran.ok() && ref_ran.ok()) {
    // fp32 scores carry a rounding error of about 2^-24 * |score|: a sharp softmax
    // (a large scale or large inputs) magnifies it, so the bound grows with the
    // largest possible score; wrong masks or indices miss by O(1).
    const double max_score = p.softmax_scale() * p.q_descale * p.k_descale * p.head_dim_qk * max_abs(t.q) * max_abs(t.k);
    const double bound = 4 * rel_l2_bound(p) + 0x1p-20 * max_score;
    const ErrorStats e = compare_outputs(t.out, ref_t.out);
    if (e.not_finite > 0 || e.rel_l2 > bound) {
      std::fprintf(stderr, "cpu_flash and reference disagree on %s scale %g q_descale %g: %s\n", p.summary().c_str(),
                   p.softmax_scale(), p.q_descale, describe(e).c_str());
      std::abort();
    }
  }
  if (ran.ok() != ref_ran.ok()) {
    // One validation path: both backends accept or refuse the same binding,
    // except where cpu_flash's own capabilities (dtypes, fp32 range) refuse more.
    if (ref_ran.ok() && (ran.has_code("AK1114") || ran.has_code("AK2104"))) return 0;
    std::fprintf(stderr, "reference %s, cpu_flash %s on %s\n", ref_ran.summary().c_str(), ran.summary().c_str(),
                 p.summary().c_str());
    std::abort();
  }
  return 0;
}
