#include <cuda_runtime.h>

#include <cmath>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/mask.hpp"
#include "backends/cudnn/aux_kernels.hpp"

namespace attnkit::cudnn {
namespace {

struct Lengths {
  int q, k;
  std::int64_t q_offset;  // first packed q row of the sequence (THD), else 0
};

// Sequence b's lengths, clamped to the planned longest lengths: the graph was
// built for those, so a longer (invalid) length must not make cuDNN read past it.
__device__ Lengths lengths(const SequenceSource& s, int b) {
  Lengths l{s.seqlen_q, s.seqlen_k, 0};
  if (s.cu_q != nullptr) {
    l.q_offset = s.cu_q[b * s.cu_q_stride];
    l.q = static_cast<int>(s.cu_q[(b + 1) * s.cu_q_stride] - l.q_offset);
  }
  if (s.seqlens_k != nullptr)
    l.k = s.seqlens_k[b * s.seqlens_k_stride];
  else if (s.cu_k != nullptr)
    l.k = s.cu_k[(b + 1) * s.cu_k_stride] - s.cu_k[b * s.cu_k_stride];
  l.q = min(max(l.q, 0), s.seqlen_q);
  l.k = min(max(l.k, 0), s.seqlen_k);
  return l;
}

// The graph's sequences past the call's are empty: no queries, no keys.
__device__ Lengths graph_lengths(const PrepareParams& p, int b) {
  return b < p.batch ? lengths(p.seq, b) : Lengths{0, 0, 0};
}

__global__ void prepare_kernel(PrepareParams p) {
  const std::int64_t offsets = p.graph_batch + 1;
  const std::int64_t table = p.page_table != nullptr ? static_cast<std::int64_t>(p.graph_batch) * p.max_pages : 0;
  const std::int64_t total = max(max(offsets, table), std::int64_t{6});
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    if (i < p.graph_batch && p.seq_q != nullptr) {
      const Lengths l = graph_lengths(p, static_cast<int>(i));
      p.seq_q[i] = l.q;
      p.seq_kv[i] = l.k;
    }
    if (i < offsets) {
      // q, o and stats rows follow cu_seqlens_q; k and v rows cu_seqlens_k. An
      // empty sequence past the call's starts where the packed rows end.
      const std::int64_t b = min(i, std::int64_t{p.batch});
      for (int r = 0; r < 5; ++r) {
        if (p.ragged[r] == nullptr) continue;
        const bool kv = r == 1 || r == 2;
        const std::int32_t* cu = kv ? p.seq.cu_k : p.seq.cu_q;
        const std::int64_t stride = kv ? p.seq.cu_k_stride : p.seq.cu_q_stride;
        const std::int64_t offset = static_cast<std::int64_t>(cu[b * stride]) * p.token_stride[r];
        if (p.offsets_int64)
          static_cast<std::int64_t*>(p.ragged[r])[i] = offset;
        else
          static_cast<std::int32_t*>(p.ragged[r])[i] = static_cast<std::int32_t>(offset);
      }
    }
    if (i < table) {
      const int b = static_cast<int>(i / p.max_pages), j = static_cast<int>(i % p.max_pages);
      const int used = (graph_lengths(p, b).k + p.page_size - 1) / p.page_size;
      p.page_table[i] =
          j < used && j < p.table_cols ? p.block_table[b * p.block_table_strides[0] + j * p.block_table_strides[1]] : 0;
    }
    if (i < 6 && p.scalars != nullptr) p.scalars[i] = p.scalar_values[i];
  }
}

// One thread per (sequence, query row), looping over heads.
__global__ void finish_kernel(FinishParams p) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.seq.seqlen_q;
  for (std::int64_t r = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += std::int64_t{gridDim.x} * blockDim.x) {
    const int b = static_cast<int>(r / p.seq.seqlen_q), i = static_cast<int>(r % p.seq.seqlen_q);
    const Lengths l = lengths(p.seq, b);
    if (i >= l.q) continue;
    const KeyRange keys = visible_keys(i, l.q, l.k, p.window_left, p.window_right);
    const bool empty = keys.hi <= keys.lo;
    for (int h = 0; h < p.heads_q; ++h) {
      if (empty) {  // O = 0: no key, no value (a sink has none either)
        const HeadRows o = head_rows(p.layout, p.out_strides, b, h, l.q_offset);
        auto* row = static_cast<std::uint16_t*>(p.out) + o.offset + i * o.row_stride;
        for (int d = 0; d < p.head_dim_v; ++d) row[d] = 0;  // +0.0 in fp16 and bf16
      }
      if (p.lse == nullptr) continue;
      float value;
      if (empty)
        value = p.sinks != nullptr ? p.sinks[h * p.sinks_stride] : -INFINITY;  // log(exp(sink)) or log(0)
      else if (p.stats == nullptr)
        continue;  // cuDNN wrote this row's LSE in place
      else if (p.stats_ragged)
        value = p.stats[(l.q_offset + i) * p.stats_strides[2] + h * p.stats_strides[1]];
      else
        value = p.stats[b * p.stats_strides[0] + h * p.stats_strides[1] + i * p.stats_strides[2]];
      const std::int64_t at = p.layout == Layout::thd
                                  ? h * p.lse_strides[0] + (l.q_offset + i) * p.lse_strides[1]
                                  : b * p.lse_strides[0] + h * p.lse_strides[1] + i * p.lse_strides[2];
      p.lse[at] = value;
    }
  }
}

constexpr int kThreads = 256;
int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

}  // namespace

int launch_prepare(const PrepareParams& p, void* stream) {
  const std::int64_t n =
      p.page_table != nullptr ? static_cast<std::int64_t>(p.graph_batch) * p.max_pages : p.graph_batch + 1;
  prepare_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int launch_finish(const FinishParams& p, void* stream) {
  finish_kernel<<<blocks_for(static_cast<std::int64_t>(p.batch) * p.seq.seqlen_q), kThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace attnkit::cudnn
