#pragma once
// What a sparse video plan runs on each platform: the dense kernel of the
// call's problem, or a block-sparse kernel over lists the backend chose, on
// the caller's tensors or on tile-ordered copies of them in the workspace.
// CpuSparseRunner (cpu_flash) and CudaSparseRunner (fa3 / fa2) implement it,
// so a backend's plan decides what to run once for both.
#include <cstddef>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::sparse {

class SparseRunner {
 public:
  virtual ~SparseRunner() = default;
  virtual std::size_t workspace_bytes() const = 0;
  // Exactly the dense kernel a plain run of the problem uses.
  virtual Diagnostics run_dense(const AttentionTensors& t, Workspace ws, StreamHandle stream) const = 0;
  // The block-sparse kernel under `layout` with lists `offsets` / `indices`
  // (int32 views: host lists given at plan time, or lists in the runner's
  // memory). `stats` (if set) counts the (query block, key block) pairs of
  // every sequence and head, and the skipped ones.
  virtual Diagnostics run_sparse(const AttentionTensors& t, const BlockSparse& layout, const TensorView& offsets,
                                 const TensorView& indices, Workspace ws, StreamHandle stream,
                                 SparsityStats* stats) const = 0;
  // Bytes at the front of the workspace left to the caller's own use (lists
  // built per call); the runner's part starts behind them, 256-byte aligned.
  void reserve_front(std::size_t bytes) { front_ = (bytes + kFrontAlign - 1) / kFrontAlign * kFrontAlign; }

 protected:
  static constexpr std::size_t kFrontAlign = 256;
  std::size_t front_ = 0;
};

// The pairs a block-sparse call decided on and skipped (both runners count alike).
void count_sparsity(const Problem& p, const Problem& inner, const BlockSparse& layout, std::int64_t listed,
                    SparsityStats* stats);

// Bytes of the tile-ordered copies of q, k, v and out (contiguous BSHD), each
// rounded up to `align` bytes: what a runner with a tiling puts in its workspace.
std::size_t tile_copies_bytes(const Problem& p, std::size_t align);

}  // namespace attnkit::sparse
