#include "attnkit/core/dlpack.hpp"

#include <memory>

namespace attnkit {

std::optional<DLDataType> to_dl_dtype(DType t) {
  switch (t) {
    case DType::f64: return DLDataType{kDLFloat, 64, 1};
    case DType::f32: return DLDataType{kDLFloat, 32, 1};
    case DType::f16: return DLDataType{kDLFloat, 16, 1};
    case DType::bf16: return DLDataType{kDLBfloat, 16, 1};
    case DType::i8: return DLDataType{kDLInt, 8, 1};
    case DType::i32: return DLDataType{kDLInt, 32, 1};
    case DType::u8: return DLDataType{kDLUInt, 8, 1};
    // DLPack 0.6 (the Debian header) has no fp8 codes; fp8 crosses as uint8 bytes.
    case DType::f8e4m3:
    case DType::f8e5m2: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<DType> from_dl_dtype(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  for (DType d : kAllDTypes) {
    const auto dl = to_dl_dtype(d);
    if (dl && dl->code == t.code && dl->bits == t.bits) return d;
  }
  return std::nullopt;
}

namespace {
// "int64", "float16", "bool", or the raw DLPack code for the rest.
std::string dl_dtype_text(DLDataType t) {
  std::string kind;
  switch (t.code) {
    case kDLInt: kind = "int"; break;
    case kDLUInt: kind = "uint"; break;
    case kDLFloat: kind = "float"; break;
    case kDLBfloat: kind = "bfloat"; break;
    case 5: kind = "complex"; break;  // kDLComplex (DLPack >= 0.8)
    case 6: return "bool";            // kDLBool (DLPack >= 0.8)
    default: kind = "DLPack type code " + std::to_string(t.code) + " of "; break;
  }
  std::string text = kind + std::to_string(t.bits);
  if (t.lanes != 1) text += " x" + std::to_string(t.lanes) + " lanes";
  return text;
}
}  // namespace

Result<TensorView> from_dlpack(const DLTensor& t, std::string_view name_in) {
  const std::string name(name_in);
  const auto dtype = from_dl_dtype(t.dtype);
  if (!dtype)
    return diagnose("AK1104", {{"name", name}, {"dtype", dl_dtype_text(t.dtype)},
                               {"expected", "one of fp64, fp32, fp16, bf16, int8, int32, uint8"}});
  if (t.ndim < 0 || t.ndim > kMaxRank)
    return diagnose("AK1102", {{"name", name}, {"rank", std::to_string(t.ndim)},
                               {"expected", "at most " + std::to_string(kMaxRank)}, {"layout", "any"}});
  if (t.ndim > 0 && t.shape == nullptr)
    return diagnose("AK1103", {{"name", name}, {"shape", "(no shape array)"}, {"expected", "a shape"}});
  TensorView v;
  switch (t.device.device_type) {
    case kDLCPU: v.device = {DeviceKind::cpu, 0}; break;
    case kDLCUDA: v.device = {DeviceKind::cuda, static_cast<int>(t.device.device_id)}; break;
    case kDLCUDAHost: v.device = {DeviceKind::cuda_host, 0}; break;
    default:
      return diagnose("AK1105", {{"name", name},
                                 {"device", "DLPack device type " + std::to_string(t.device.device_type)},
                                 {"expected", "cpu or cuda"}});
  }
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  v.dtype = *dtype;
  v.rank = t.ndim;
  std::int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides ? t.strides[d] : stride;  // null strides: compact row-major
    stride *= t.shape[d];
  }
  return v;
}

namespace {
// Owns the shape/stride arrays the DLTensor points at, and the release hook.
struct ExportContext {
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};
  std::function<void()> release;
};
}  // namespace

DLManagedTensor* to_dlpack(const TensorView& view, std::function<void()> release) {
  auto ctx = std::make_unique<ExportContext>();
  ctx->shape = view.shape;
  ctx->strides = view.strides;
  ctx->release = std::move(release);
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = view.data;
  m->dl_tensor.ndim = view.rank;
  const auto dl = to_dl_dtype(view.dtype);
  m->dl_tensor.dtype = dl.value_or(DLDataType{kDLUInt, 8, 1});
  switch (view.device.kind) {
    case DeviceKind::cpu: m->dl_tensor.device = {kDLCPU, 0}; break;
    case DeviceKind::cuda: m->dl_tensor.device = {kDLCUDA, view.device.index}; break;
    case DeviceKind::cuda_host: m->dl_tensor.device = {kDLCUDAHost, 0}; break;
  }
  m->dl_tensor.shape = ctx->shape.data();
  m->dl_tensor.strides = ctx->strides.data();
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx.release();
  m->deleter = [](DLManagedTensor* self) {
    auto* c = static_cast<ExportContext*>(self->manager_ctx);
    if (c->release) c->release();
    delete c;
    delete self;
  };
  return m;
}

}  // namespace attnkit
