#pragma once
// The front of a sparse plan's workspace: the per-call lists, pooled
// statistics, partial outputs and per-thread scratch it needs, laid out at
// plan time (aligned slices; 64 bytes unless the plan asks for more, as CUDA
// plans do), so that run() allocates nothing.
#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "attnkit/backends/backend.hpp"

namespace attnkit::sparse {

class WorkspaceFront {
 public:
  explicit WorkspaceFront(std::size_t align = 64) : align_(align) {}
  // A slice of `bytes`; returns its offset.
  std::size_t take(std::size_t bytes) {
    const std::size_t at = size_;
    size_ += round_up(bytes);
    return at;
  }
  // One slice of `bytes` per thread of `threads`; returns the first's offset.
  std::size_t take_per_thread(std::size_t bytes, int threads) {
    per_thread_ = round_up(bytes);
    return take(per_thread_ * static_cast<std::size_t>(threads));
  }
  std::size_t size() const { return size_; }

  template <class T>
  static T* at(Workspace ws, std::size_t offset) {
    return reinterpret_cast<T*>(ws.data() + offset);
  }
  // The caller's workspace from its first `align`-byte aligned byte (a plan
  // that needs an aligned base reserves `align` bytes of slack for it).
  static Workspace aligned(Workspace ws, std::size_t align) {
    const auto at = reinterpret_cast<std::uintptr_t>(ws.data());
    return ws.subspan((at + align - 1) / align * align - at);
  }
  // The calling OpenMP thread's slice of take_per_thread().
  template <class T>
  T* mine(Workspace ws, std::size_t offset) const {
    return reinterpret_cast<T*>(ws.data() + offset + per_thread_ * static_cast<std::size_t>(omp_get_thread_num()));
  }

 private:
  std::size_t round_up(std::size_t bytes) const { return (bytes + align_ - 1) / align_ * align_; }

  std::size_t align_;
  std::size_t size_ = 0;
  std::size_t per_thread_ = 0;
};

}  // namespace attnkit::sparse
