#include "testing/guarded_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>

namespace attnkit::testing {

GuardedBuffer::GuardedBuffer(std::size_t bytes) : bytes_(bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t usable = (bytes + page - 1) / page * page;
  map_bytes_ = usable + page;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* base = static_cast<std::byte*>(map_);
  if (mprotect(base + usable, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
  data_ = base + usable - bytes;  // the buffer's last byte is the guard page's neighbour
}

GuardedBuffer::~GuardedBuffer() { munmap(map_, map_bytes_); }

TensorView guarded_view(const GuardedBuffer& buf, DType dtype, std::initializer_list<std::int64_t> shape) {
  TensorView v = make_view(nullptr, dtype, shape);
  const auto bytes = static_cast<std::size_t>(v.numel()) * dtype_size(dtype);
  if (bytes > buf.size()) throw std::runtime_error("guarded_view: the shape does not fit in the buffer");
  v.data = buf.data() + (buf.size() - bytes);
  return v;
}

SparseRegion::SparseRegion(std::size_t bytes) : bytes_(bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  data_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

SparseRegion::~SparseRegion() {
  if (data_) munmap(data_, bytes_);
}

}  // namespace attnkit::testing
