#pragma once
// sparge_attn's block selection on the GPU (docs/sparse.md section 5): per
// (sequence, head), 128-query and 64-key blocks pooled into means and
// self-similarity flags, each query block's pooled scores softmaxed over the
// smooth key blocks and ranked, the kept blocks written as CSR lists
// (csr_lists.hpp). Four kernels on the caller's stream, in buffers the
// caller laid out in its workspace: nothing allocated, nothing synchronised,
// capturable. Pooling and scores repeat the host's arithmetic
// (sparse/sparge.cpp) operation for operation, rounded alike (no fused
// multiply-adds), so both see the same means, flags and scores; the softmax
// sums in another order (last-bit differences, which only an exact tie in
// probability could turn into another block). Plain C++ declarations; the
// kernels are sparge_select.cu.
#include <cstddef>
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"

namespace attnkit::cuda {

struct SpargeSelect {
  const void* q = nullptr;  // device, fp16 / bf16 (dtype)
  const void* k = nullptr;
  DType dtype = DType::bf16;
  std::int64_t q_strides[3]{}, k_strides[3]{};  // elements between batches, tokens, heads (the dim is contiguous)
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen = 0, head_dim = 0;
  int block_q = 128, block_k = 64;
  double scale = 1.0;
  double simthreshd1 = -0.1;
  double cdfthreshd = 0.0;  // > 0: the cumulative rule
  int topk_blocks = 1;      // otherwise: the blocks the top-k rule keeps (sparge_topk_blocks)
  // Workspace buffers (device), rows = batch * heads_q * query blocks, units = batch * heads_kv * key blocks.
  float* q_mean = nullptr;           // [rows, head_dim]
  std::uint8_t* q_smooth = nullptr;  // [rows]
  float* k_mean = nullptr;           // [units, head_dim]
  std::uint8_t* k_smooth = nullptr;  // [units]
  std::uint8_t* keep = nullptr;      // [rows, key blocks]
  std::int32_t* counts = nullptr;    // [rows]
  std::int32_t* offsets = nullptr;   // [rows + 1]: the CSR offsets
  std::int32_t* indices = nullptr;   // [rows * key blocks]: the CSR indices (offsets[rows] of them used)
};

// The largest head dim and key-block count the kernels take (the pool
// kernel's shared tile; the selection sorts a row's key blocks in shared memory).
inline constexpr int kSpargeMaxHeadDim = 128;
// Dynamic shared memory of the selection kernel for `key_blocks` blocks.
std::size_t sparge_select_smem_bytes(int key_blocks, int head_dim);
// Raises the selection kernel's dynamic shared-memory limit to `bytes` (at
// plan time, so run() stays capturable).
Diagnostics configure_sparge_select(std::size_t bytes);
// Queues pooling, selection, the offsets scan and the index compaction.
Diagnostics sparge_select(const SpargeSelect& s, StreamHandle stream);

}  // namespace attnkit::cuda
