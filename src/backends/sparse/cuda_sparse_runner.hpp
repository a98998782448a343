#pragma once
// The CUDA path of the sparse video backends: the `fa` kernel of this GPU
// planned once for the call's dense problem and for each of its block-sparse
// variants, each the first of fa3, fa2 that takes it (fa3 on sm_90, fa2 on
// sm_80+; fa2 for a block layout fa3 cannot tile); the lists the backend
// decides at plan time and the token-order index arrays are uploaded then
// (lists decided per call arrive as device views). At run time: the dense
// kernel on the caller's tensors, or the block-sparse kernel on the caller's
// tensors. Tile-ordered lists over raster-order tokens (a `tiling`) run on
// fa3bsr, which reads raster rows in tile-ordered boxes, when it takes the
// call (sm_90, blocks of whole tile planes: backends/cuda/raster_tiles.hpp),
// else on tile-ordered copies in the workspace (gathered and scattered back
// on the caller's stream by backends/cuda/gather_rows).
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/block_sparse.hpp"
#include "attnkit/core/video_tiles.hpp"
#include "backends/sparse/sparse_runner.hpp"

namespace attnkit::sparse {

// The `fa` kernel of this GPU for one kernel problem, null with the reasons
// appended to `why` when none takes it. The first of fa3, fa2 that takes it,
// as select resolves "fa" (fa3 on Hopper, else fa2). Each problem resolves on
// its own, so a dense run is exactly what a dense `fa` run is, and a block
// layout fa3 cannot tile (its block-sparse instances take 128-query blocks of
// 128-key tiles, at d128 also of 64-key tiles, sparge's 128 x 64 blocks, and
// 64-query blocks of 64-key tiles, sol's and VSA's) runs fa2's. With `q64`, a
// block-sparse problem fa3 and fa2 refuse (off sm_90) may run on fa2's
// 64-query-tile instances (fa2bsq64, backends/cuda/fa2_q64.hpp), which the
// registry's fa2 does not offer: for the backends whose 64-query blocks fit
// neither (their CUDA paths declared on their own flags).
const Backend* flash_for(const Problem& p, const Platform& gpu, Diagnostics& why, bool q64 = false);

class CudaSparseRunner final : public SparseRunner {
 public:
  // Plans for `p` (dense) and `p` under each of `layouts`; `lists` are every
  // host list set run_sparse will be given (uploaded now). With `tiling`, the
  // block-sparse runs read tokens in tile order (fa3bsr or copies). With `q64`, block layouts fa3
  // and fa2 refuse may run on fa2's 64-query-tile instances (fa2bsq64, not
  // offered by the registry's fa2). AK6002 in a build without CUDA.
  static Result<std::unique_ptr<CudaSparseRunner>> create(const Problem& p, const Platform& gpu,
                                                          const std::vector<BlockSparse>& layouts,
                                                          const std::vector<const BlockSparseLists*>& lists,
                                                          std::optional<VideoTiling> tiling, bool q64 = false);
  // What create() would refuse about the kernels (the same rule, no device
  // needed): a backend's check() shares it with its plan. `tiled`: create()
  // is given a tiling (the tile-ordered copies are BSHD).
  static Diagnostics check_kernels(const Problem& p, const Platform& gpu, const std::vector<BlockSparse>& layouts,
                                   bool tiled = false, bool q64 = false);
  ~CudaSparseRunner() override;

  std::size_t workspace_bytes() const override;
  Diagnostics run_dense(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override;
  // `offsets` / `indices`: host views of a list set given to create() (their
  // device copies run), or device views (run as they are).
  Diagnostics run_sparse(const AttentionTensors& t, const BlockSparse& layout, const TensorView& offsets,
                         const TensorView& indices, Workspace ws, StreamHandle stream,
                         SparsityStats* stats) const override;

 private:
  struct Device;  // device buffers (CUDA builds)
  CudaSparseRunner();
  using LayoutKey = std::tuple<int, int, int, int>;
  static LayoutKey key(const BlockSparse& b) { return {b.block_q, b.block_k, b.batch, b.heads}; }
  static constexpr std::size_t kAlign = 256;
  std::size_t copies_bytes() const;
  std::size_t kernel_offset() const;  // behind the caller's front and the copies
  // Plans every layout on fa3bsr (sparse_), or nothing and false when it refuses one.
  bool plan_raster_order(const Problem& p, const Platform& gpu, const std::vector<BlockSparse>& layouts,
                         const VideoTiling& tiling);

  Problem problem_;
  std::optional<VideoTiling> tiling_;
  bool raster_order_ = false;
  std::unique_ptr<Plan> dense_;
  std::map<LayoutKey, std::unique_ptr<Plan>> sparse_;
  std::unique_ptr<Device> device_;
};

}  // namespace attnkit::sparse
