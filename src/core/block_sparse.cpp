#include "attnkit/core/block_sparse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "attnkit/core/host_memory.hpp"

namespace attnkit {

BlockSparseShape block_sparse_shape(const Problem& p) {
  const BlockSparse& bs = *p.block_sparse;
  BlockSparseShape s;
  s.num_q_blocks = num_blocks(p.seqlen_q, bs.block_q);
  s.num_k_blocks = num_blocks(p.seqlen_k, bs.block_k);
  s.rows = static_cast<std::int64_t>(bs.batch) * bs.heads * s.num_q_blocks;
  return s;
}

TensorView BlockSparseLists::offsets_view() const {
  return make_view(const_cast<std::int32_t*>(offsets.data()), DType::i32, {static_cast<std::int64_t>(offsets.size())});
}

TensorView BlockSparseLists::indices_view() const {
  TensorView v = make_view(const_cast<std::int32_t*>(indices.data()), DType::i32, {nnz()});
  return v;
}

void BlockSparseLists::bind(AttentionTensors& t) const {
  t.block_offsets = offsets_view();
  t.block_indices = indices_view();
}

namespace {

Diagnostic bad_lists(std::string reason) { return diagnose("AK1115", {{"reason", std::move(reason)}}); }

// The helpers read their arrays on the host: device memory is AK1105, not a host read.
Diagnostics host_only(std::initializer_list<std::pair<const TensorView*, const char*>> arrays) {
  Diagnostics out;
  for (const auto& [t, name] : arrays)
    if (t->device.kind == DeviceKind::cuda)
      out.add("AK1105", {{"name", name}, {"device", device_name(t->device)}, {"expected", "cpu (host memory)"}});
  return out;
}

}  // namespace

Result<BlockSparseLists> block_sparse_from_mask(const Problem& p, const TensorView& mask) {
  if (!p.block_sparse) return Diagnostics(bad_lists("the problem has no block_sparse layout"));
  const BlockSparse& bs = *p.block_sparse;
  const BlockSparseShape shape = block_sparse_shape(p);
  const std::int64_t expected[4] = {bs.batch, bs.heads, shape.num_q_blocks, shape.num_k_blocks};
  bool ok = mask.rank == 4 && mask.dtype == DType::u8 && mask.data != nullptr;
  for (int d = 0; ok && d < 4; ++d) ok = mask.shape[d] == expected[d];
  if (!ok)
    return Diagnostics(diagnose(
        "AK1103", {{"name", "block mask"},
                   {"shape", mask.shape_string() + " " + std::string(dtype_name(mask.dtype))},
                   {"expected", fmt::format("[{}, {}, {}, {}] uint8", bs.batch, bs.heads, shape.num_q_blocks,
                                            shape.num_k_blocks)}}));
  if (Diagnostics why = host_only({{&mask, "block mask"}}); !why.ok()) return why;
  BlockSparseLists out;
  out.offsets.reserve(static_cast<std::size_t>(shape.rows) + 1);
  out.offsets.push_back(0);
  const auto* m = mask.ptr<const std::uint8_t>();
  for (int b = 0; b < bs.batch; ++b)
    for (int h = 0; h < bs.heads; ++h)
      for (int qb = 0; qb < shape.num_q_blocks; ++qb) {
        const std::int64_t base = b * mask.strides[0] + h * mask.strides[1] + qb * mask.strides[2];
        for (int kb = 0; kb < shape.num_k_blocks; ++kb)
          if (m[base + kb * mask.strides[3]] != 0) out.indices.push_back(kb);
        if (out.indices.size() > static_cast<std::size_t>(INT32_MAX))
          return Diagnostics(bad_lists("more than 2^31 - 1 listed blocks (int32 offsets)"));
        out.offsets.push_back(static_cast<std::int32_t>(out.indices.size()));
      }
  return out;
}

Diagnostics validate_block_sparse_lists(const Problem& p, const TensorView& offsets, const TensorView& indices) {
  if (!p.block_sparse || offsets.device.kind == DeviceKind::cuda || indices.device.kind == DeviceKind::cuda) return {};
  const BlockSparseShape shape = block_sparse_shape(p);
  if (offsets.rank != 1 || offsets.shape[0] != shape.rows + 1 || indices.rank != 1) return {};  // the binding says why
  const auto* off = offsets.ptr<const std::int32_t>();
  const auto* idx = indices.ptr<const std::int32_t>();
  const std::int64_t so = offsets.strides[0], si = indices.strides[0], nnz = indices.shape[0];
  Diagnostics out;
  if (off[0] != 0) {
    out.add(bad_lists("block_offsets[0] is " + std::to_string(off[0]) + ", not 0"));
    return out;
  }
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    const std::int64_t begin = off[r * so], end = off[(r + 1) * so];
    if (end < begin) {
      out.add(bad_lists("block_offsets decreases at row " + std::to_string(r) + " (" + std::to_string(begin) + " -> " +
                        std::to_string(end) + ")"));
      return out;
    }
    if (end > nnz) break;  // reported below
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int32_t kb = idx[e * si];
      if (kb < 0 || kb >= shape.num_k_blocks) {
        out.add(bad_lists("block_indices[" + std::to_string(e) + "] = " + std::to_string(kb) + " (row " +
                          std::to_string(r) + ") is not a key block below " + std::to_string(shape.num_k_blocks)));
        return out;
      }
      if (e > begin && kb <= idx[(e - 1) * si]) {
        out.add(bad_lists("row " + std::to_string(r) + " of block_indices is not strictly ascending (" +
                          std::to_string(idx[(e - 1) * si]) + " then " + std::to_string(kb) + " at entry " +
                          std::to_string(e) + ")"));
        return out;
      }
    }
  }
  if (off[shape.rows * so] != nnz)
    out.add(bad_lists("block_offsets ends at " + std::to_string(off[shape.rows * so]) + " but block_indices has " +
                      std::to_string(nnz) + " entries"));
  return out;
}

Result<HostTensor> block_sparse_dense_mask(const Problem& p, const TensorView& offsets, const TensorView& indices) {
  if (!p.block_sparse) return Diagnostics(bad_lists("the problem has no block_sparse layout"));
  const BlockSparseShape shape = block_sparse_shape(p);
  if (offsets.rank != 1 || offsets.shape[0] != shape.rows + 1 || indices.rank != 1 || offsets.dtype != DType::i32 ||
      indices.dtype != DType::i32)
    return Diagnostics(diagnose("AK1103", {{"name", "block_offsets"},
                                           {"shape", offsets.shape_string()},
                                           {"expected", fmt::format("[{}] int32", shape.rows + 1)}}));
  if (Diagnostics why = host_only({{&offsets, "block_offsets"}, {&indices, "block_indices"}}); !why.ok()) return why;
  if (Diagnostics why = validate_block_sparse_lists(p, offsets, indices); !why.ok()) return why;
  const BlockSparse& bs = *p.block_sparse;
  // Bytes in double (four ints multiply past int64); negative: overflowed, refused.
  const double bytes = static_cast<double>(shape.rows) * shape.num_k_blocks;
  if (Diagnostics why = check_host_allocation("the dense block mask", bytes < 0x1p62 ? std::int64_t(bytes) : -1);
      !why.ok())
    return why;
  HostTensor mask(DType::u8, {bs.batch, bs.heads, shape.num_q_blocks, shape.num_k_blocks});
  auto* m = mask.view().ptr<std::uint8_t>();
  const auto* off = offsets.ptr<const std::int32_t>();
  const auto* idx = indices.ptr<const std::int32_t>();
  for (std::int64_t r = 0; r < shape.rows; ++r)
    for (std::int64_t e = off[r * offsets.strides[0]]; e < off[(r + 1) * offsets.strides[0]]; ++e)
      m[r * shape.num_k_blocks + idx[e * indices.strides[0]]] = 1;
  return mask;
}

double block_sparse_flops(const Problem& p, const BlockSparseLists& lists) {
  const BlockSparse& bs = *p.block_sparse;
  const BlockSparseShape shape = block_sparse_shape(p);
  // Each row stands for (batch / bs.batch) * (heads_q / bs.heads) (sequence, head) pairs.
  const double copies = static_cast<double>(p.batch / bs.batch) * (p.heads_q / bs.heads);
  double pairs = 0.0;
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    const int qb = static_cast<int>(r % shape.num_q_blocks);
    const int rows_in_block = std::min(bs.block_q, p.seqlen_q - qb * bs.block_q);
    for (std::int32_t e = lists.offsets[r]; e < lists.offsets[r + 1]; ++e) {
      const int kb = lists.indices[e];
      pairs += static_cast<double>(rows_in_block) * std::min(bs.block_k, p.seqlen_k - kb * bs.block_k);
    }
  }
  return 2.0 * copies * pairs * (p.head_dim_qk + p.head_dim_v);
}

double block_sparse_density(const Problem& p, const BlockSparseLists& lists) {
  const BlockSparseShape shape = block_sparse_shape(p);
  const double all = static_cast<double>(shape.rows) * shape.num_k_blocks;
  return all > 0 ? static_cast<double>(lists.nnz()) / all : 0.0;
}

}  // namespace attnkit
