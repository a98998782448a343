#pragma once
// The front of a CPU sparse plan's workspace: the per-call lists, pooled
// statistics and per-thread scratch it needs, laid out at plan time (64-byte
// aligned slices), so that run() allocates nothing.
#include <omp.h>

#include <cstddef>

#include "attnkit/backends/backend.hpp"

namespace attnkit::sparse {

class WorkspaceFront {
 public:
  // A slice of `bytes`; returns its offset.
  std::size_t take(std::size_t bytes) {
    const std::size_t at = size_;
    size_ += (bytes + 63) / 64 * 64;
    return at;
  }
  // One slice of `bytes` per thread of `threads`; returns the first's offset.
  std::size_t take_per_thread(std::size_t bytes, int threads) {
    per_thread_ = (bytes + 63) / 64 * 64;
    return take(per_thread_ * static_cast<std::size_t>(threads));
  }
  std::size_t size() const { return size_; }

  template <class T>
  static T* at(Workspace ws, std::size_t offset) {
    return reinterpret_cast<T*>(ws.data() + offset);
  }
  // The calling OpenMP thread's slice of take_per_thread().
  template <class T>
  T* mine(Workspace ws, std::size_t offset) const {
    return reinterpret_cast<T*>(ws.data() + offset + per_thread_ * static_cast<std::size_t>(omp_get_thread_num()));
  }

 private:
  std::size_t size_ = 0;
  std::size_t per_thread_ = 0;
};

}  // namespace attnkit::sparse
