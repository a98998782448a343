#include <algorithm>
#include <cstring>
#include <new>

#include "attnkit/core/host_memory.hpp"
#include "dist/device_ops.hpp"

namespace attnkit::dist {
namespace {

float load(const std::byte* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::f16: return f16_to_float(reinterpret_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(reinterpret_cast<const std::uint16_t*>(base)[i]);
    default: return reinterpret_cast<const float*>(base)[i];
  }
}

void store(std::byte* base, DType t, std::int64_t i, float x) {
  switch (t) {
    case DType::f16: reinterpret_cast<std::uint16_t*>(base)[i] = float_to_f16(x); break;
    case DType::bf16: reinterpret_cast<std::uint16_t*>(base)[i] = float_to_bf16(x); break;
    default: reinterpret_cast<float*>(base)[i] = x;
  }
}

class HostOps final : public DeviceOps {
 public:
  Diagnostics copy_rows(const RowCopy& c, std::span<const RowRun> runs, StreamHandle) const override {
    const auto* src = static_cast<const std::byte*>(c.src);
    auto* dst = static_cast<std::byte*>(c.dst);
    const std::size_t src_elem = dtype_size(c.src_dtype), dst_elem = dtype_size(c.dst_dtype);
    const bool same = c.src_dtype == c.dst_dtype;
    for (const RowRun& run : runs) {
#pragma omp parallel for num_threads(host_threads()) schedule(static) if (run.rows * c.heads * c.dim > 65536)
      for (std::int64_t r = 0; r < run.rows; ++r)
        for (int h = 0; h < c.heads; ++h) {
          const std::int64_t s = run.src + r * c.src_row_stride + h * c.src_head_stride;
          const std::int64_t d = run.dst + r * c.dst_row_stride + h * c.dst_head_stride;
          if (same) {
            std::memcpy(dst + d * dst_elem, src + s * src_elem, static_cast<std::size_t>(c.dim) * src_elem);
            continue;
          }
          for (int e = 0; e < c.dim; ++e) store(dst, c.dst_dtype, d + e, load(src, c.src_dtype, s + e));
        }
    }
    return {};
  }
  Diagnostics merge(const MergeRows& m, StreamHandle) const override {
    merge_partial_host(m);
    return {};
  }
  Diagnostics fill(float* data, std::int64_t count, float value, StreamHandle) const override {
    std::fill(data, data + count, value);
    return {};
  }
  Diagnostics copy_bytes(void* dst, const void* src, std::size_t bytes, StreamHandle) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return {};
  }
  Diagnostics synchronize(StreamHandle) const override { return {}; }
  Result<void*> allocate(std::size_t bytes) const override {
    return ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{256});
  }
  void release(void* p) const override { ::operator delete(p, std::align_val_t{256}); }
};

}  // namespace

const DeviceOps& host_ops() {
  static const HostOps ops;
  return ops;
}

DeviceCopies::~DeviceCopies() {
  for (void* p : owned_) ops_.release(p);
}

Result<TensorView> DeviceCopies::place(const TensorView& host) {
  if (device_.kind != DeviceKind::cuda || host.data == nullptr) return host;
  auto p = scratch(static_cast<std::size_t>(host.span_bytes()));
  if (!p) return p.diagnostics();
  if (Diagnostics why = ops_.copy_bytes(*p, host.data, host.span_bytes(), nullptr); !why.ok()) return why;
  TensorView v = host;
  v.data = *p;
  v.device = device_;
  return v;
}

Diagnostics DeviceCopies::place_all(AttentionTensors& t) {
  Diagnostics why;
  for (TensorView* v : {&t.q, &t.k, &t.v, &t.out, &t.lse, &t.sinks}) {
    auto placed = place(*v);
    if (!placed) why.append(placed.diagnostics());
    else *v = *placed;
  }
  return why;
}

Diagnostics DeviceCopies::fetch(const TensorView& device, const TensorView& host) const {
  if (device.data == host.data || host.data == nullptr) return {};
  Diagnostics why = ops_.copy_bytes(host.data, device.data, host.span_bytes(), nullptr);
  return why.ok() ? ops_.synchronize(nullptr) : why;
}

Result<void*> DeviceCopies::scratch(std::size_t bytes) {
  auto p = ops_.allocate(bytes);
  if (p) owned_.push_back(*p);
  return p;
}

Result<const DeviceOps*> ops_for(DeviceKind memory) {
  if (memory != DeviceKind::cuda) return &host_ops();
  if (const DeviceOps* ops = cuda_ops()) return ops;
  return diagnose("AK6002", {{"reason", "this build has no CUDA (sequence-parallel buffers on a GPU)"}});
}

}  // namespace attnkit::dist
