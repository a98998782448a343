#include "backends/sparse/sparse_runner.hpp"

#include "attnkit/core/block_sparse.hpp"

namespace attnkit::sparse {

void count_sparsity(const Problem& p, const Problem& inner, const BlockSparse& layout, std::int64_t listed,
                    SparsityStats* stats) {
  if (stats == nullptr) return;
  const BlockSparseShape shape = block_sparse_shape(inner);
  const std::int64_t pairs = static_cast<std::int64_t>(p.batch) * p.heads_q * shape.num_q_blocks * shape.num_k_blocks;
  stats->blocks += pairs;
  stats->blocks_skipped += pairs - static_cast<std::int64_t>(p.batch / layout.batch) * (p.heads_q / layout.heads) * listed;
}

std::size_t tile_copies_bytes(const Problem& p, std::size_t align) {
  auto round_up = [align](std::size_t bytes) { return (bytes + align - 1) / align * align; };
  const std::size_t tokens = static_cast<std::size_t>(p.batch) * p.seqlen_q;
  const std::size_t in = dtype_size(p.dtype), out = dtype_size(p.out_dtype());
  return round_up(tokens * p.heads_q * p.head_dim_qk * in) + round_up(tokens * p.heads_kv * p.head_dim_qk * in) +
         round_up(tokens * p.heads_kv * p.head_dim_v * in) + round_up(tokens * p.heads_q * p.head_dim_v * out);
}

}  // namespace attnkit::sparse
