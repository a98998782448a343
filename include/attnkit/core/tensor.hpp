#pragma once
// A non-owning view of a strided tensor: pointer, shape, strides (in elements),
// dtype and device. attnkit never owns caller memory; DLPack (core/dlpack.hpp)
// converts to and from this view.
#include <array>
#include <cstdint>
#include <string>

#include "attnkit/core/dtype.hpp"

namespace attnkit {

enum class DeviceKind : std::uint8_t { cpu, cuda, cuda_host };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};
std::string device_name(Device d);

inline constexpr int kMaxRank = 5;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements, may be 0 (broadcast)

  bool defined() const { return data != nullptr || rank > 0; }
  std::int64_t numel() const;
  std::int64_t size(int dim) const { return shape[dim]; }
  std::int64_t stride(int dim) const { return strides[dim]; }
  bool is_contiguous() const;
  // Bytes between the lowest and the highest addressed element, plus one element.
  std::int64_t span_bytes() const;
  std::string shape_string() const;  // "[2, 128, 8, 64]"

  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  std::byte* bytes() const { return static_cast<std::byte*>(data); }
};

// A contiguous (row-major) view over `data` with the given shape.
TensorView make_view(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                     Device device = {});

}  // namespace attnkit
