#include "backends/cudnn/support.hpp"

#include <algorithm>
#include <string>

#include "attnkit/platform/platform.hpp"
#include "backends/cudnn/graph_spec.hpp"

namespace attnkit::cudnn {
namespace {

bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

}  // namespace

Diagnostics support_reasons(const Problem& p, int sm, int version) {
  Diagnostics out;
  const std::string where = "sm_" + std::to_string(sm);
  const std::string release = version > 0 ? cudnn_version_string(version) : "unknown";
  auto refuse = [&](const std::string& reason) {
    out.add("AK2113", {{"version", release}, {"platform", where}, {"reason", reason}});
  };
  // Version rules only when the version is known (AK2110 covers a missing library).
  auto before = [&](int v) { return version > 0 && version < v; };
  auto at_most = [&](int v) { return version > 0 && version <= v; };
  const auto dtype_mismatch = [&](const char* role, DType got, std::string supported) {
    out.add("AK2104", {{"backend", "cudnn"},
                       {"role", role},
                       {"dtype", std::string(dtype_name(got))},
                       {"supported", std::move(supported)}});
  };

  const int major = sm / 10;
  const bool fp8 = is_fp8(p.dtype);
  const bool thd = p.layout == Layout::thd, paged = p.paged_kv.has_value();
  const bool decode = p.seqlen_q == 1;
  const int d_max = std::max(p.head_dim_qk, p.head_dim_v);
  const Window w = p.effective_window();
  const bool has_left = w.left >= 0, has_right = w.right >= 0;
  // The diagonal is bottom-right aligned whenever lengths may differ.
  const bool bottom_right = p.mask != MaskKind::none && (needs_padding_mask(p) || p.seqlen_q != p.seqlen_k);

  if (p.seqlen_q < 1 || p.seqlen_k < 1)
    refuse("cuDNN's graph needs a longest sequence of at least 1 query and 1 key (seqlen_q " +
           std::to_string(p.seqlen_q) + ", seqlen_k " + std::to_string(p.seqlen_k) + ")");
  if (p.k_dtype() != p.dtype)
    dtype_mismatch("k/v", p.k_dtype(), "the q dtype (" + std::string(dtype_name(p.dtype)) + "): cuDNN has one io type");

  if (!fp8) {
    if (p.out_dtype() != p.dtype)
      dtype_mismatch("out", p.out_dtype(), "the q dtype (" + std::string(dtype_name(p.dtype)) + ")");
    if (p.head_dim_qk % 8 != 0 || p.head_dim_v % 8 != 0)
      refuse("head dims must be multiples of 8 (d_qk " + std::to_string(p.head_dim_qk) + ", d_v " +
             std::to_string(p.head_dim_v) + ")");
    if (version == 91000 || version == 91001)
      refuse("cuDNN 9.10.0 and 9.10.1 have known SDPA forward bugs; use 9.10.2 or newer");
    if (major == 8 && at_most(90900) && d_max > 128) refuse("head dims above 128 on sm_8x need cuDNN 9.10");
    if (major == 10 && before(90900) && d_max > 128) refuse("head dims above 128 on sm_10x need cuDNN 9.9");
    if (p.has_sinks && before(91300)) refuse("attention sinks need cuDNN 9.13");
    if (p.has_sinks && decode) refuse("cuDNN's decode path (seqlen_q = 1) takes no sink token");
    if (paged && before(90500)) refuse("paged KV caches need cuDNN 9.5");
    if (paged && d_max > 128 && at_most(90900)) refuse("paged KV caches with head dims above 128 need cuDNN 9.10");
    if (paged && thd && before(90700)) refuse("a paged KV cache under packed (THD) queries needs cuDNN 9.7");
    if (thd && sm < 90 && before(91801)) refuse("packed (THD) sequences below sm_90 need cuDNN 9.18.1");
    if (has_left && !has_right && before(91002)) refuse("a window without a right bound needs cuDNN 9.10.2");
    if (version == 91400 && has_left && !has_right && p.seqlen_k > 1024)
      refuse("cuDNN 9.14.0 has a known bug with a left-only window over more than 1024 keys; use 9.14.1 or newer");
    if (bottom_right && has_right && before(90600) && (p.seqlen_q % 64 != 0 || p.seqlen_k % 64 != 0))
      refuse("a bottom-right diagonal before cuDNN 9.6 needs seqlen_q and seqlen_k multiples of 64");
    if (has_left && bottom_right && p.seqlen_q != p.seqlen_k && before(90600))
      refuse("a window with seqlen_q != seqlen_k needs cuDNN 9.6");
    if (decode && major == 10 && d_max > 128 && at_most(90900))
      refuse("decode (seqlen_q = 1) with head dims above 128 on sm_10x needs cuDNN 9.10");
    if (decode && has_right && at_most(90900)) refuse("decode (seqlen_q = 1) with a mask needs cuDNN 9.10");
    return out;
  }

  // fp8 (e4m3 / e5m2) inputs, per-tensor descales.
  if (sm < 90) refuse("fp8 attention needs sm_90 or newer");
  if (major == 9)
    refuse(
        "cuDNN's fp8 attention on Hopper writes fp8 outputs, which attnkit's output types (fp16, bf16, fp32) "
        "exclude; fp16/bf16 outputs need Blackwell (sm_100+)");
  if (before(91300)) refuse("fp8 inputs with fp16/bf16 outputs need cuDNN 9.13");
  const bool d192 = !before(91900) && p.head_dim_qk == 192 && p.head_dim_v == 128;
  if ((p.head_dim_qk > 128 || p.head_dim_qk % 16 != 0) && !d192)
    refuse("fp8 head dims must be multiples of 16 up to 128 (or d_qk 192 with d_v 128 from cuDNN 9.19)");
  if (p.head_dim_v > 128 || p.head_dim_v % 16 != 0) refuse("fp8 head dim d_v must be a multiple of 16 up to 128");
  if (major == 12 && thd) refuse("fp8 attention with packed (THD) sequences is not supported on sm_12x");
  if (bottom_right && has_right && before(90700)) refuse("fp8 with a bottom-right causal mask needs cuDNN 9.7");
  if (p.mask == MaskKind::sliding_window) refuse("the cudnn backend wires fp8 for no mask and causal only");
  if (p.has_sinks || paged) refuse("the cudnn backend wires fp8 without sinks and without a paged KV cache");
  return out;
}

}  // namespace attnkit::cudnn
