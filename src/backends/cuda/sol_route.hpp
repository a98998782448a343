#pragma once
// sol_attn's routing on the GPU (docs/sparse.md section 4): the tiles' mean
// keys (fp32 for the routing; in q's dtype with the mean values for the
// pooled-key kernel), per query block the proxy scores against every key
// tile and the kept tiles (sparse/sol_rule.hpp: the host's arithmetic,
// operation for operation, so the kept tiles are the CPU path's) and the CSR
// lists of the kept tiles (csr_lists.hpp). Kernels on the caller's stream in
// buffers the caller laid out in its workspace: nothing allocated, nothing
// synchronised, capturable. Plain C++ declarations; the kernels are sol_route.cu.
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
  // Workspace buffers (device); rows = batch * heads_q * query blocks, T = key tiles.
  float* k_mean = nullptr;           // [batch, T, heads_kv, head_dim]: what the routing scores
  void* k_pooled = nullptr;          // [batch, T, heads_kv, head_dim] in dtype: k_mean rounded
  void* v_pooled = nullptr;          // [batch, T, heads_kv, head_dim_v] in dtype: the tiles' mean values
  double* z = nullptr;               // [rows, T]: proxy scores
  std::uint8_t* keep = nullptr;      // [rows, T]
  std::int32_t* counts = nullptr;    // [rows]
  std::int32_t* offsets = nullptr;   // [rows + 1]: the CSR offsets
  std::int32_t* indices = nullptr;   // [rows * T]: the CSR indices (offsets[rows] of them used)
};

// The largest head dim the routing kernel pools (its shared query mean).
inline constexpr int kSolMaxHeadDim = 512;

// Lets the routing kernel use the shared memory its larger shapes need (plan
// time, on the plan's device; not during a graph capture).
Diagnostics configure_sol_route();
// Queues the tile means, the routing and the CSR lists.
Diagnostics sol_route(const SolRoute& s, StreamHandle stream);

}  // namespace attnkit::cuda
