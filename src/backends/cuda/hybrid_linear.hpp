#pragma once
// hybrid_window_attn_h3's linear branch and combine on the GPU
// (docs/sparse.md section 5c): out = window_softmax + gate * phi(q) . S / (phi(q) . z)
// with phi = elu + 1 (sparse/hybrid_window.hpp, the CPU path's formulas), on
// tensor cores with bf16 operands and fp32 sums. The sequence is cut into
// `chunks` chunks of `chunk` tokens per (sequence, kv head), each walked in
// sub-blocks of 64 tokens:
//   1. per chunk, S = phi(K)^T V and z = sum of phi(k_j) over its keys;
//   2. per (sequence, kv head), over the chunks in order: causal, each chunk's
//      state becomes the sum of the chunks before it (an exclusive scan); full,
//      the first chunk's becomes the sum of all;
//   3. per (sequence, query head, chunk), each sub-block: phi(Q) S and phi(Q) . z;
//      causal adds the sub-block's own keys j <= i and then adds them to S and
//      z; out = hybrid_combine(window, gate, num, den), rounded once.
// Kernels on the caller's stream in buffers the caller laid out in its
// workspace: nothing allocated, nothing synchronised, capturable. Plain C++
// declarations; the kernels are hybrid_linear.cu.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"

namespace attnkit::cuda {

struct HybridLinear {
  const void* q = nullptr;  // device, fp16 / bf16 (dtype), BSHD or BHSD
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::bf16;
  std::int64_t q_strides[3]{}, k_strides[3]{}, v_strides[3]{};  // elements between batches, tokens, heads
  int batch = 1, seqlen = 0, heads_q = 1, heads_kv = 1, head_dim = 0;  // head_dim: 64 or 128 (= v's)
  bool causal = false;  // keys j <= i (the window sees no later key), else every key
  int chunk = 64, chunks = 0;  // hybrid_linear_chunking
  float* state = nullptr;      // [batch * heads_kv * chunks, head_dim * head_dim + head_dim] (workspace)
  const void* window = nullptr;  // the softmax branch, in dtype (the workspace)
  std::int64_t window_strides[3]{};  // elements between batches, tokens, heads
  const float* gate = nullptr;   // fp32, q's token order (AttentionTensors::gate)
  Layout layout = Layout::bshd;
  std::int64_t gate_strides[3]{};  // the gate view's strides (core/attention_tensors.hpp gate_offset)
  void* out = nullptr;
  std::int64_t out_strides[3]{};  // elements between batches, tokens, heads
};

// Tokens per chunk: a multiple of 64, at most 32 chunks (the state buffer's size).
struct HybridChunking {
  int chunk = 64, chunks = 0;
};
inline HybridChunking hybrid_linear_chunking(std::int64_t seqlen) {
  constexpr std::int64_t kMaxChunks = 32, kQuantum = 64;
  const std::int64_t per = (seqlen + kMaxChunks - 1) / kMaxChunks;
  const std::int64_t chunk = std::max(kQuantum, (per + kQuantum - 1) / kQuantum * kQuantum);
  return {static_cast<int>(chunk), static_cast<int>((seqlen + chunk - 1) / chunk)};
}
// Floats of the state buffer.
inline std::int64_t hybrid_linear_state_floats(int batch, int heads_kv, int chunks, int head_dim) {
  return static_cast<std::int64_t>(batch) * heads_kv * chunks * (static_cast<std::int64_t>(head_dim) * head_dim + head_dim);
}

// Shared memory of the kernels at head dim d, 64-token sub-blocks: `raws`
// tiles as read (2-byte elements, rows packed), `ops` bf16 operand tiles (rows
// padded by 16 bytes), then, in the query kernels, S in bf16, z and the row
// denominators; the query kernels stage num in fp32 half a row at a time over
// q's operand tile (the last one), which holds exactly 64 x (d / 2 + 4) floats.
// hybrid_linear.cu lays its buffers out from these offsets.
struct HybridLinearSmem {
  static constexpr int kRows = 64;
  int d, raws, ops;
  bool query;
  constexpr int operand_ld() const { return d + 8; }
  constexpr int num_ld() const { return d / 2 + 4; }
  constexpr int raw_bytes() const { return kRows * d * 2; }
  constexpr int op_bytes() const { return kRows * operand_ld() * 2; }
  constexpr int raw(int t) const { return t * raw_bytes(); }
  constexpr int op(int t) const { return raws * raw_bytes() + t * op_bytes(); }
  constexpr int s() const { return op(ops); }
  constexpr int z() const { return s() + d * operand_ld() * 2; }
  constexpr int den() const { return z() + d * 4; }
  constexpr int num() const { return op(ops - 1); }
  constexpr int bytes() const { return query ? den() + kRows * 4 : s(); }
};
// The chunk-state kernel: k and v. The query kernel: q; causal also k and v (k, v, q's operand tiles in that order).
constexpr HybridLinearSmem hybrid_chunk_state_smem(int d) { return {d, 2, 2, false}; }
constexpr HybridLinearSmem hybrid_query_smem(int d, bool causal) { return {d, causal ? 3 : 1, causal ? 3 : 1, true}; }
// The most any of the three kernels takes (the plan checks it against the GPU's limit a CTA).
constexpr std::size_t hybrid_linear_smem_bytes(int d, bool causal) {
  return static_cast<std::size_t>(std::max(hybrid_chunk_state_smem(d).bytes(), hybrid_query_smem(d, causal).bytes()));
}

// Lets the kernels of this dtype, head dim and causality take their shared
// memory: at plan time, on the plan's device, so that hybrid_linear stays capturable.
Diagnostics configure_hybrid_linear(DType dtype, int head_dim, bool causal);
// Queues the three steps (AK2105 for a head dim other than 64 / 128).
Diagnostics hybrid_linear(const HybridLinear& a, StreamHandle stream);

}  // namespace attnkit::cuda
