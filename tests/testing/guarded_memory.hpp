#pragma once
// Test memory that makes out-of-bounds reads fault: a buffer that ends exactly
// at a PROT_NONE page (so reading one byte past it is a SIGSEGV), and a large
// sparse region (MAP_NORESERVE) for tensors with offsets past 2^31 elements
// whose untouched pages cost nothing.
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "attnkit/core/tensor.hpp"

namespace attnkit::testing {

class GuardedBuffer {
 public:
  // `bytes` usable bytes; data() + bytes is the first byte of a guard page.
  explicit GuardedBuffer(std::size_t bytes);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A contiguous host view over `buf` with the given dtype and shape; its last
// element ends at the guard page. The shape must fit in buf.size().
TensorView guarded_view(const GuardedBuffer& buf, DType dtype, std::initializer_list<std::int64_t> shape);

class SparseRegion {
 public:
  explicit SparseRegion(std::size_t bytes);  // zero pages until written
  ~SparseRegion();
  SparseRegion(const SparseRegion&) = delete;
  SparseRegion& operator=(const SparseRegion&) = delete;

  bool ok() const { return data_ != nullptr; }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace attnkit::testing
