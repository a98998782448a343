#pragma once
// The CPU path of the sparse video backends: cpu_flash plans for a call's
// dense problem and for the block-sparse variants the backend runs, planned
// once; at run time, the dense kernel on the caller's tensors, or the
// block-sparse kernel on the caller's tensors or on tile-ordered copies of
// them in the workspace (sliding tiles), with lists the backend provides.
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/video_tiles.hpp"
#include "backends/sparse/sparse_runner.hpp"

namespace attnkit::sparse {

class CpuSparseRunner final : public SparseRunner {
 public:
  // Plans cpu_flash for `p` (the dense path) and for `p` under each of
  // `layouts`; with `tiling`, the block-sparse runs see tile-ordered copies
  // of q, k, v and write a tile-ordered out that is permuted back. With
  // `partial`, the block-sparse runs return their LSE and an fp32 out (the
  // caller binds both), to be merged with another partial result.
  static Result<std::unique_ptr<CpuSparseRunner>> create(const Problem& p, const Platform& cpu,
                                                         const std::vector<BlockSparse>& layouts,
                                                         std::optional<VideoTiling> tiling, bool partial = false);

  std::size_t workspace_bytes() const override;
  // Exactly the dense kernel a cpu_flash run of `p` uses.
  Diagnostics run_dense(const AttentionTensors& t, Workspace ws, StreamHandle stream = nullptr) const override;
  // The block-sparse kernel under `layout` (one given to create()) with lists
  // `offsets` / `indices` (host int32 views). `stats` (if set) counts the
  // (query block, key block) pairs of every sequence and head, and the listed ones.
  Diagnostics run_sparse(const AttentionTensors& t, const BlockSparse& layout, const TensorView& offsets,
                         const TensorView& indices, Workspace ws, StreamHandle stream,
                         SparsityStats* stats) const override;
  const Problem& problem() const { return problem_; }

 private:
  using LayoutKey = std::tuple<int, int, int, int>;
  static LayoutKey key(const BlockSparse& b) { return {b.block_q, b.block_k, b.batch, b.heads}; }
  static std::size_t round_up(std::size_t bytes) { return (bytes + 63) / 64 * 64; }
  std::size_t copies_bytes() const;  // tile-ordered q, k, v, out

  Problem problem_;
  std::optional<VideoTiling> tiling_;
  std::unique_ptr<Plan> dense_;
  std::map<LayoutKey, std::unique_ptr<Plan>> sparse_;
};

}  // namespace attnkit::sparse
