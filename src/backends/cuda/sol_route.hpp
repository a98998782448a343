#pragma once
// sol_attn's routing on the GPU (docs/sparse.md section 4): the pooled
// problem's inputs q' = [q, 1], k' = [mean k, ln(tokens) / scale], v' = mean v
// (fp32), per query block the proxy scores against every key tile and the
// kept tiles (sparse/sol_rule.hpp: the host's arithmetic, operation for
// operation, so the kept tiles are the CPU path's), the CSR lists of the kept
// tiles (csr_lists.hpp) and the pooled problem's custom mask (1 where a tile
// is pooled). Kernels on the caller's stream in buffers the caller laid out
// in its workspace: nothing allocated, nothing synchronised, capturable.
// Plain C++ declarations; the kernels are sol_route.cu.
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/sparse/sol_rule.hpp"

namespace attnkit::cuda {

struct SolRoute {
  const void* q = nullptr;  // device, fp16 / bf16 (dtype), BSHD or BHSD
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::bf16;
  std::int64_t q_strides[3]{}, k_strides[3]{}, v_strides[3]{};  // elements between batches, tokens, heads
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen = 0, head_dim = 0, head_dim_v = 0;
  double scale = 1.0;
  sparse::SolRule rule;
  // k''s last column, ln(tokens) / scale in fp32, computed on the host as the
  // CPU path does (a device log may differ in the last bit): full tiles, the last tile.
  float ln_full = 0.0f, ln_last = 0.0f;
  // Workspace buffers (device); rows = batch * heads_q * query blocks, T = key tiles, d1 = head_dim + 1.
  float* q1 = nullptr;               // [batch, seqlen, heads_q, d1]
  float* k1 = nullptr;               // [batch, T, heads_kv, d1]
  float* v1 = nullptr;               // [batch, T, heads_kv, head_dim_v]
  double* z = nullptr;               // [rows, T]: proxy scores
  std::uint8_t* keep = nullptr;      // [rows, T]
  std::int32_t* counts = nullptr;    // [rows]
  std::int32_t* offsets = nullptr;   // [rows + 1]: the CSR offsets
  std::int32_t* indices = nullptr;   // [rows * T]: the CSR indices (offsets[rows] of them used)
  std::uint8_t* mask = nullptr;      // [batch, heads_q, seqlen, T]: 1 = pooled key visible
};

// The largest head dim the routing kernel pools (its shared query mean).
inline constexpr int kSolMaxHeadDim = 512;

// Queues q', k', v', the routing, the CSR lists and the mask.
Diagnostics sol_route(const SolRoute& s, StreamHandle stream);

}  // namespace attnkit::cuda
