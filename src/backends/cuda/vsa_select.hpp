#pragma once
// video_sparse_attn_h3's coarse pass and cube selection on the GPU
// (docs/sparse.md section 5b): the cube means of q, k, v (4 x 4 x 4 cubes
// in tile order), per query cube the coarse scores against every key cube
// of its kv head, the `keep` key cubes ranked first (sparse/video_sparse_rule.hpp:
// the host's arithmetic and tie rule, so the kept cubes are the CPU path's),
// the coarse output softmax(C) . v_mean, and the kept cubes as CSR lists
// (csr_lists.hpp); after the fine pass, out = fine + gate * coarse. Kernels
// on the caller's stream in buffers the caller laid out in its workspace:
// nothing allocated, nothing synchronised, capturable. Plain C++
// declarations; the kernels are vsa_select.cu.
#include <cstdint>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/video_tiles.hpp"

namespace attnkit::cuda {

struct VsaSelect {
  const void* q = nullptr;  // device, fp16 / bf16 (dtype), BSHD or BHSD, raster order
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::bf16;
  std::int64_t q_strides[3]{}, k_strides[3]{}, v_strides[3]{};  // elements between batches, tokens, heads
  int batch = 1, heads_q = 1, heads_kv = 1, head_dim = 0, head_dim_v = 0;
  VideoTiling cubes;  // 4 x 4 x 4 tiles of the grid
  double scale = 1.0;
  int keep = 1;  // key cubes each query cube keeps (video_sparse_keep)
  // Workspace buffers (device); rows = batch * heads_q * cubes, kv = batch * heads_kv * cubes.
  float* q_mean = nullptr;         // [rows, head_dim]
  float* k_mean = nullptr;         // [kv, head_dim]
  float* v_mean = nullptr;         // [kv, head_dim_v]
  double* scores = nullptr;        // [rows, cubes]: the coarse pass's scores of key cubes past the first 512 of a row (fewer stay in registers)
  float* coarse = nullptr;         // [rows, head_dim_v]: the coarse output
  std::uint8_t* flags = nullptr;   // [rows, cubes]: kept key cubes
  std::int32_t* counts = nullptr;  // [rows]
  std::int32_t* offsets = nullptr; // [rows + 1]
  std::int32_t* indices = nullptr; // [rows * cubes] (offsets[rows] used)
};

// Lets the coarse pass take the shared memory these head dims need (48.1 KB at
// d 256): at plan time, on the plan's device, so that vsa_select stays capturable.
Diagnostics configure_vsa_select(int head_dim, int head_dim_v);
// Queues the means, the coarse pass with the selection, and the CSR lists.
Diagnostics vsa_select(const VsaSelect& s, StreamHandle stream);

// out[b, i, h] = fine[b, i, h] + gate[b, i, h] * coarse[b, h, cube(i)], rounded once to out's dtype.
struct VsaCombine {
  const void* fine = nullptr;  // [batch, seqlen, heads_q, head_dim_v] contiguous, in out's dtype
  const float* coarse = nullptr;
  const float* gate = nullptr;  // fp32, q's token order (AttentionTensors::gate)
  Layout layout = Layout::bshd;
  std::int64_t gate_strides[3]{};  // the gate view's strides (core/attention_tensors.hpp gate_offset)
  void* out = nullptr;
  DType dtype = DType::bf16;
  std::int64_t out_strides[3]{};  // elements between batches, tokens, heads
  int batch = 1, seqlen = 0, heads_q = 1, head_dim_v = 0;
  VideoTiling cubes;
};
Diagnostics vsa_combine(const VsaCombine& c, StreamHandle stream);

}  // namespace attnkit::cuda
