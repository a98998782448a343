#include "attnkit/core/tensor.hpp"


namespace attnkit {

std::string device_name(Device d) {
  switch (d.kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda:" + std::to_string(d.index);
    case DeviceKind::cuda_host: return "cuda_host";
  }
  return "?";
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::int64_t TensorView::span_bytes() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (int i = 0; i < rank; ++i) last += (shape[i] - 1) * (strides[i] < 0 ? 0 : strides[i]);
  return (last + 1) * static_cast<std::int64_t>(dtype_size(dtype));
}

std::string TensorView::shape_string() const {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

TensorView make_view(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                     Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t s : shape) v.shape[i++] = s;
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

}  // namespace attnkit
