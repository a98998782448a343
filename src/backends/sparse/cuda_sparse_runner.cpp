#include "backends/sparse/cuda_sparse_runner.hpp"

#include <algorithm>

#include "attnkit/backends/registry.hpp"
#include "backends/cuda/fa2_q64.hpp"
#include "backends/cuda/raster_tiles.hpp"
#include "backends/sparse/device_args.hpp"
#if defined(ATTNKIT_HAS_CUDA)
#include "backends/cuda/device.hpp"
#include "backends/cuda/gather_rows.hpp"
#endif

namespace attnkit::sparse {

#if defined(ATTNKIT_HAS_CUDA)
struct CudaSparseRunner::Device {
  cuda::DeviceBuffer to_tiles, from_tiles;  // int32 [seqlen]: the source row of each destination row
  struct Lists {
    cuda::DeviceBuffer offsets, indices;
    std::int64_t rows = 0, nnz = 0;
  };
  std::map<const void*, Lists> lists;  // by the host offsets' data pointer
};
#else
struct CudaSparseRunner::Device {};
#endif

CudaSparseRunner::CudaSparseRunner() = default;
CudaSparseRunner::~CudaSparseRunner() = default;

namespace {

// The kernel problems of `p` under `layouts` (the tile-ordered copies are BSHD).
std::vector<Problem> kernel_problems(const Problem& p, const std::vector<BlockSparse>& layouts, bool tiled) {
  std::vector<Problem> inners;
  for (const BlockSparse& layout : layouts) {
    Problem inner = p;
    inner.block_sparse = layout;
    if (tiled) inner.layout = Layout::bshd;
    inners.push_back(inner);
  }
  return inners;
}

}  // namespace

const Backend* flash_for(const Problem& p, const Platform& gpu, Diagnostics& why, bool q64) {
  static const std::unique_ptr<Backend> fa2_q64 = make_fa2_q64_block_sparse_backend();
  Diagnostics tried;
  for (const char* name : {"fa3", "fa2"}) {
    const Backend* b = default_registry().find(name);
    if (b == nullptr) continue;
    Diagnostics d = b->check(p, gpu);
    if (d.ok()) return b;
    tried.append(d);
  }
  if (q64 && p.block_sparse) {
    Diagnostics d = fa2_q64->check(p, gpu);
    if (d.ok()) return fa2_q64.get();
    tried = d;  // its reasons are the ones that decide
  }
  why.append(tried);
  return nullptr;
}

Diagnostics CudaSparseRunner::check_kernels(const Problem& p, const Platform& gpu,
                                            const std::vector<BlockSparse>& layouts, bool tiled, bool q64) {
  Diagnostics why;
  flash_for(p, gpu, why);
  for (const Problem& inner : kernel_problems(p, layouts, tiled)) flash_for(inner, gpu, why, q64);
  return why;
}

Result<std::unique_ptr<CudaSparseRunner>> CudaSparseRunner::create(const Problem& p, const Platform& gpu,
                                                                   const std::vector<BlockSparse>& layouts,
                                                                   const std::vector<const BlockSparseLists*>& lists,
                                                                   std::optional<VideoTiling> tiling, bool q64) {
  auto runner = std::unique_ptr<CudaSparseRunner>(new CudaSparseRunner());
  runner->problem_ = p;
  runner->tiling_ = tiling;
  runner->device_ = std::make_unique<Device>();
  const std::vector<Problem> inners = kernel_problems(p, layouts, tiling.has_value());
  Diagnostics why;
  const Backend* dense_flash = flash_for(p, gpu, why);
  if (dense_flash == nullptr) return why;
  auto dense = dense_flash->plan(p, gpu);
  if (!dense) return dense.diagnostics();
  runner->dense_ = std::move(*dense);
  // Tile-ordered lists on raster-order tokens: fa3bsr reads the caller's
  // tensors when it takes every layout, else the lists run on gathered copies.
  if (tiling) runner->raster_order_ = runner->plan_raster_order(p, gpu, layouts, *tiling);
  for (std::size_t i = 0; i < layouts.size() && !runner->raster_order_; ++i) {
    if (runner->sparse_.count(key(layouts[i]))) continue;
    const Backend* flash = flash_for(inners[i], gpu, why, q64);
    if (flash == nullptr) return why;
    auto plan = flash->plan(inners[i], gpu);
    if (!plan) return plan.diagnostics();
    runner->sparse_.emplace(key(layouts[i]), std::move(*plan));
  }
  // The kernels' reasons above are the same in every build; the uploads need CUDA.
#if !defined(ATTNKIT_HAS_CUDA)
  (void)lists;
  return diagnose("AK6002", {{"reason", "this build has no CUDA (the sparse video backends' CUDA path)"}});
#else
  for (const BlockSparseLists* l : lists) {
    Device::Lists d;
    auto offsets = cuda::DeviceBuffer::upload(l->offsets.data(), l->offsets.size() * sizeof(std::int32_t));
    if (!offsets) return offsets.diagnostics();
    auto indices = cuda::DeviceBuffer::upload(l->indices.data(), l->indices.size() * sizeof(std::int32_t));
    if (!indices) return indices.diagnostics();
    d.offsets = std::move(*offsets);
    d.indices = std::move(*indices);
    d.rows = static_cast<std::int64_t>(l->offsets.size());
    d.nnz = l->nnz();
    runner->device_->lists.emplace(l->offsets.data(), std::move(d));
  }
  if (tiling && !runner->raster_order_) {
    std::vector<std::int32_t> to(p.seqlen_q), from(p.seqlen_q);
    for (int s = 0; s < p.seqlen_q; ++s) {
      to[s] = static_cast<std::int32_t>(raster_index(*tiling, s));          // tile-ordered row s <- raster row
      from[s] = static_cast<std::int32_t>(tile_order_index(*tiling, s));    // raster row s <- tile-ordered row
    }
    auto t = cuda::DeviceBuffer::upload(to.data(), to.size() * sizeof(std::int32_t));
    if (!t) return t.diagnostics();
    auto f = cuda::DeviceBuffer::upload(from.data(), from.size() * sizeof(std::int32_t));
    if (!f) return f.diagnostics();
    runner->device_->to_tiles = std::move(*t);
    runner->device_->from_tiles = std::move(*f);
  }
  return runner;
#endif
}

bool CudaSparseRunner::plan_raster_order(const Problem& p, const Platform& gpu, const std::vector<BlockSparse>& layouts,
                                         const VideoTiling& tiling) {
  const std::unique_ptr<Backend> raster = make_fa3_raster_block_sparse_backend(tiling);
  std::map<LayoutKey, std::unique_ptr<Plan>> plans;
  for (const BlockSparse& layout : layouts) {
    if (plans.count(key(layout))) continue;
    Problem inner = p;
    inner.block_sparse = layout;
    auto plan = raster->plan(inner, gpu);  // plan() checks: AK2109 / AK2117 / AK2111 leave it to the gathers
    if (!plan) return false;
    plans.emplace(key(layout), std::move(*plan));
  }
  sparse_ = std::move(plans);
  return true;
}

// 256-byte aligned copies: the kernels' 16-byte rows and TMA's base alignment.
std::size_t CudaSparseRunner::copies_bytes() const {
  return tiling_ && !raster_order_ ? tile_copies_bytes(problem_, kAlign) : 0;
}
std::size_t CudaSparseRunner::kernel_offset() const { return front_ + copies_bytes(); }

std::size_t CudaSparseRunner::workspace_bytes() const {
  std::size_t kernel = dense_ ? dense_->workspace_bytes() : 0;
  for (const auto& [k, plan] : sparse_) kernel = std::max(kernel, plan->workspace_bytes());
  return kernel_offset() + kernel;
}

Diagnostics CudaSparseRunner::run_dense(const AttentionTensors& t, Workspace ws, StreamHandle stream) const {
  if (ws.size() < workspace_bytes())
    return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
  return dense_->run(t, ws.subspan(kernel_offset()), stream);
}

Diagnostics CudaSparseRunner::run_sparse(const AttentionTensors& t, const BlockSparse& layout,
                                         const TensorView& offsets, const TensorView& indices, Workspace ws,
                                         StreamHandle stream, SparsityStats* stats) const {
#if !defined(ATTNKIT_HAS_CUDA)
  (void)t, (void)layout, (void)offsets, (void)indices, (void)ws, (void)stream, (void)stats;
  return diagnose("AK6002", {{"reason", "this build has no CUDA (the sparse video backends' CUDA path)"}});
#else
  if (ws.size() < workspace_bytes())
    return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
  const auto planned = sparse_.find(key(layout));
  if (planned == sparse_.end())
    return diagnose("AK6002", {{"reason", "the sparse plan has no kernel for this block layout (a bug in the backend)"}});
  const Plan& plan = *planned->second;
  const Problem& p = problem_;
  AttentionTensors inner = t;
  inner.block_offsets = offsets;
  inner.block_indices = indices;
  if (offsets.device.kind == DeviceKind::cpu) {  // plan-time lists: their device copies
    const auto found = device_->lists.find(offsets.data);
    if (found == device_->lists.end())
      return diagnose("AK6002", {{"reason", "host block lists that were not uploaded at plan time (a bug in the backend)"}});
    const Device::Lists& d = found->second;
    inner.block_offsets = make_view(d.offsets.data(), DType::i32, {d.rows}, t.q.device);
    inner.block_indices = make_view(d.indices.data(), DType::i32, {d.nnz}, t.q.device);
  }
  count_sparsity(p, plan.problem(), layout, indices.numel(), stats);
  Workspace kernel_ws = ws.subspan(kernel_offset());
  if (!tiling_ || raster_order_) return plan.run(inner, kernel_ws, stream);
  // The caller's tensors are checked before the gathers read them.
  if (Diagnostics why = validate_binding(p, t, {DeviceKind::cuda, 0}); !why.ok()) return why;
  const int B = p.batch, S = p.seqlen_q;
  std::byte* at = ws.data() + front_;
  auto take = [&](DType dtype, int heads, int dim) {
    std::byte* here = at;
    const std::size_t bytes = static_cast<std::size_t>(B) * S * heads * dim * dtype_size(dtype);
    at += (bytes + kAlign - 1) / kAlign * kAlign;  // as tile_copies_bytes lays them out
    return here;
  };
  // Copies rows between a caller's tensor (BSHD or BHSD: token_strides) and a contiguous BSHD copy.
  auto gather = [&](const void* src, const std::int64_t (&ss)[3], void* dst, const std::int64_t (&ds)[3], int heads,
                    int dim, DType dtype, const cuda::DeviceBuffer& index) {
    cuda::GatherRows g;
    g.src = src;
    g.dst = dst;
    g.index = static_cast<const std::int32_t*>(index.data());
    g.rows = g.src_rows = S;
    g.batch = B;
    g.heads = heads;
    g.dim = dim;
    g.elem_bytes = static_cast<int>(dtype_size(dtype));
    for (int i = 0; i < 3; ++i) g.src_strides[i] = ss[i], g.dst_strides[i] = ds[i];
    return cuda::gather_rows(g, stream);
  };
  struct Copy {
    const TensorView* caller;
    TensorView* inner;
    int heads, dim;
  };
  const Copy copies[] = {{&t.q, &inner.q, p.heads_q, p.head_dim_qk},
                         {&t.k, &inner.k, p.heads_kv, p.head_dim_qk},
                         {&t.v, &inner.v, p.heads_kv, p.head_dim_v},
                         {&t.out, &inner.out, p.heads_q, p.head_dim_v}};
  for (const Copy& c : copies) {
    std::byte* buf = take(c.caller->dtype, c.heads, c.dim);
    *c.inner = make_view(buf, c.caller->dtype, {B, S, c.heads, c.dim}, c.caller->device);
    if (c.caller == &t.out) continue;  // written by the kernel, scattered back below
    std::int64_t ss[3], ds[3] = {static_cast<std::int64_t>(S) * c.heads * c.dim, static_cast<std::int64_t>(c.heads) * c.dim, c.dim};
    token_strides(p.layout, *c.caller, ss);
    if (Diagnostics why = gather(c.caller->data, ss, buf, ds, c.heads, c.dim, c.caller->dtype, device_->to_tiles);
        !why.ok())
      return why;
  }
  if (Diagnostics ran = plan.run(inner, kernel_ws, stream); !ran.ok()) return ran;
  std::int64_t ss[3] = {static_cast<std::int64_t>(S) * p.heads_q * p.head_dim_v,
                        static_cast<std::int64_t>(p.heads_q) * p.head_dim_v, p.head_dim_v},
               ds[3];
  token_strides(p.layout, t.out, ds);
  return gather(inner.out.data, ss, t.out.data, ds, p.heads_q, p.head_dim_v, t.out.dtype, device_->from_tiles);
#endif
}

}  // namespace attnkit::sparse
