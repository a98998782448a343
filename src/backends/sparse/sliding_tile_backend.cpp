// sliding_tile_attn: STA's 3D tile windows, per layer and head from the mask
// strategy, dense for the first skip_time_steps steps (docs/sparse.md).
#include "attnkit/backends/sparse.hpp"
#include "attnkit/sparse/sliding_tile.hpp"
#include "backends/sparse/cpu_sparse_runner.hpp"
#include "backends/sparse/cuda_sparse_runner.hpp"
#include "backends/sparse/sparse_backend.hpp"

namespace attnkit {
namespace sparse {
namespace {

class SlidingTilePlan final : public Plan {
 public:
  SlidingTilePlan(Problem p, SlidingTileSchedule schedule, std::unique_ptr<SparseRunner> runner)
      : Plan(std::move(p)), schedule_(std::move(schedule)), runner_(std::move(runner)) {}

  std::size_t workspace_bytes() const override { return runner_->workspace_bytes(); }
  // The window depends on the step and the layer: a call without them is refused (AK3021).
  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    return run_at({}, t, ws, stream);
  }
  Diagnostics run_at(const CallContext& where, const AttentionTensors& t, Workspace ws,
                     StreamHandle stream) const override {
    auto choice = schedule_.choose(where);
    if (!choice) return choice.diagnostics();
    if (choice->dense) {
      if (where.stats) {
        where.stats->dense = true;
        where.stats->dense_reason = choice->dense_reason;
      }
      return runner_->run_dense(t, ws, stream);
    }
    return runner_->run_sparse(t, choice->layout, choice->lists->offsets_view(), choice->lists->indices_view(), ws,
                               stream, where.stats);
  }

 private:
  SlidingTileSchedule schedule_;
  std::unique_ptr<SparseRunner> runner_;
};

// The block layouts a schedule's lists come in: one tile a block, lists shared
// by the heads (one window) or one set per head.
std::vector<BlockSparse> layouts_of(const TileGeometry& geometry, const Problem& p) {
  const int block = geometry.block();
  return {BlockSparse{block, block, 1, 1}, BlockSparse{block, block, 1, p.heads_q}};
}

class SlidingTileBackend final : public SparseVideoBackend {
 public:
  SlidingTileBackend()
      : SparseVideoBackend("sliding_tile_attn",
                           "3D sliding tile attention over video latents (STA): tokens permuted into tiles, a window "
                           "of tiles per query tile from the mask strategy, text tokens dense",
                           sparse_video_capabilities({32, 64, 96, 128, 160, 192, 224, 256})) {}

 protected:
  // The schedule's refusals (geometry, sta_mode, the strategy file), then on
  // CUDA the kernels for its tile blocks.
  Diagnostics call_refusals(const Problem& p, const Platform& platform,
                            const select::BackendConfig& config) const override {
    auto geometry = SlidingTileSchedule::check(p, config);
    if (!geometry) return geometry.diagnostics();
    if (platform.kind != PlatformKind::cuda) return {};
    return CudaSparseRunner::check_kernels(p, platform, layouts_of(*geometry, p), /*tiled=*/true);
  }
  Result<std::unique_ptr<Plan>> plan_cpu(const Problem& p, const Platform& cpu,
                                         const select::BackendConfig& config) const override {
    auto schedule = SlidingTileSchedule::create(p, config);
    if (!schedule) return schedule.diagnostics();
    auto runner = CpuSparseRunner::create(p, cpu, layouts_of(schedule->geometry(), p), schedule->geometry().tiling);
    if (!runner) return runner.diagnostics();
    return std::unique_ptr<Plan>(std::make_unique<SlidingTilePlan>(p, std::move(*schedule), std::move(*runner)));
  }
  // The same schedule on the GPU: the lists of every (step, layer) and the
  // tile permutation uploaded once, fa3 / fa2 over them (docs/perf/gpu-sparse.md).
  bool has_cuda_path() const override { return true; }
  Result<std::unique_ptr<Plan>> plan_cuda(const Problem& p, const Platform& gpu,
                                          const select::BackendConfig& config) const override {
    auto schedule = SlidingTileSchedule::create(p, config);
    if (!schedule) return schedule.diagnostics();
    auto runner =
        CudaSparseRunner::create(p, gpu, layouts_of(schedule->geometry(), p), schedule->list_sets(), schedule->geometry().tiling);
    if (!runner) return runner.diagnostics();
    return std::unique_ptr<Plan>(std::make_unique<SlidingTilePlan>(p, std::move(*schedule), std::move(*runner)));
  }
};

}  // namespace
}  // namespace sparse

std::unique_ptr<Backend> make_sliding_tile_backend() { return std::make_unique<sparse::SlidingTileBackend>(); }

}  // namespace attnkit
