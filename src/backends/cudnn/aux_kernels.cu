#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/mask.hpp"
#include "backends/cudnn/aux_kernels.hpp"
#include "kernels/cuda/params.hpp"

namespace attnkit::cudnn {
namespace {

struct Lengths {
  int q, k;
  std::int64_t q_offset;  // first packed q row of the sequence (THD), else 0
};

// Rows of packed sequence b, clamped into [0, rows] and to `longest`, and
// whether they keep the host's rules (AK1108): params.hpp's clamp and rule,
// which the flash kernels apply too.
struct Packed {
  std::int64_t lo;
  int len;
  bool ok;
};
__device__ Packed packed(const std::int32_t* cu, std::int64_t stride, int b, std::int64_t rows, int longest) {
  const cuda::PackedRows r = cuda::packed_rows(cu, stride, b, rows);
  return {r.offset, min(r.len, longest), cuda::packed_sequence_ok(cu, stride, b, rows, longest)};
}

// Sequence b's lengths, clamped to the planned longest lengths (the graph was
// built for those, so a longer (invalid) length must not make cuDNN read past
// it) and into the packed rows; `ok`: the metadata keeps the host's rules.
__device__ Lengths lengths(const SequenceSource& s, int b, bool* ok = nullptr) {
  Lengths l{s.seqlen_q, s.seqlen_k, 0};
  bool good = true;
  if (s.cu_q != nullptr) {
    const Packed q = packed(s.cu_q, s.cu_q_stride, b, s.rows_q, s.seqlen_q);
    l.q_offset = q.lo;
    l.q = q.len;
    good = good && q.ok;
  }
  if (s.seqlens_k != nullptr) {
    l.k = s.seqlens_k[b * s.seqlens_k_stride];
    good = good && l.k >= 0 && l.k <= s.seqlen_k;
  } else if (s.cu_k != nullptr) {
    const Packed k = packed(s.cu_k, s.cu_k_stride, b, s.rows_k, s.seqlen_k);
    l.k = k.len;
    good = good && k.ok;
  }
  l.q = min(max(l.q, 0), s.seqlen_q);
  l.k = min(max(l.k, 0), s.seqlen_k);
  if (ok != nullptr) *ok = good;
  return l;
}

// The packed offset of sequence b's first row (b == batch: the end), clamped as lengths() does.
__device__ std::int64_t packed_offset(const std::int32_t* cu, std::int64_t stride, std::int64_t b, std::int64_t rows) {
  return min(max(static_cast<std::int64_t>(cu[b * stride]), std::int64_t{0}), rows);
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
        const std::int64_t offset = packed_offset(cu, stride, b, kv ? p.seq.rows_k : p.seq.rows_q) * p.token_stride[r];
        if (p.offsets_int64)
          static_cast<std::int64_t*>(p.ragged[r])[i] = offset;
        else
          static_cast<std::int32_t*>(p.ragged[r])[i] = static_cast<std::int32_t>(offset);
      }
    }
    if (i < table) {
      const int b = static_cast<int>(i / p.max_pages), j = static_cast<int>(i % p.max_pages);
      const int used = (graph_lengths(p, b).k + p.page_size - 1) / p.page_size;
      std::int32_t page =
          j < used && j < p.table_cols ? p.block_table[b * p.block_table_strides[0] + j * p.block_table_strides[1]] : 0;
      if (p.num_pages > 0 && (page < 0 || page >= p.num_pages)) {
        page = 0;  // cuDNN reads the page it is given
        if (j < used && p.bad_pages != nullptr) p.bad_pages[b] = 1;  // every writer writes 1
      }
      p.page_table[i] = page;
    }
    if (i < 6 && p.scalars != nullptr) p.scalars[i] = p.scalar_values[i];
  }
}

// Whether the call's metadata keeps the host's rules, for the whole CTA.
__device__ bool call_ok(const SequenceSource& s, int batch) {
  bool ok = true;
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    bool good = true;
    lengths(s, b, &good);
    ok = ok && good;
  }
  return __syncthreads_and(ok) != 0;
}

// NaN over O and LSE of packed row / (b, i) for every head.
__device__ void poison_row(const FinishParams& p, int b, std::int64_t q_offset, std::int64_t i) {
  const std::uint16_t nan = 0x7fff;  // a quiet NaN in fp16 and in bf16
  for (int h = 0; h < p.heads_q; ++h) {
    const HeadRows o = head_rows(p.layout, p.out_strides, b, h, q_offset);
    auto* row = static_cast<std::uint16_t*>(p.out) + o.offset + i * o.row_stride;
    for (int d = 0; d < p.head_dim_v; ++d) row[d] = nan;
    if (p.lse == nullptr) continue;
    p.lse[lse_offset(p.layout, p.lse_strides, b, h, i, q_offset)] = NAN;
  }
}

// A call whose metadata lies: NaN over every packed row (THD) or every
// batch x seqlen_q row, after cuDNN wrote them.
__device__ void poison_call(const FinishParams& p) {
  const bool packed_rows = p.layout == Layout::thd;
  const std::int64_t rows = packed_rows ? p.seq.rows_q : static_cast<std::int64_t>(p.batch) * p.seq.seqlen_q;
  for (std::int64_t r = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += std::int64_t{gridDim.x} * blockDim.x) {
    if (packed_rows)
      poison_row(p, 0, 0, r);
    else
      poison_row(p, static_cast<int>(r / p.seq.seqlen_q), 0, r % p.seq.seqlen_q);
  }
}

// One thread per (sequence, query row), looping over heads.
__global__ void finish_kernel(FinishParams p) {
  if (!call_ok(p.seq, p.batch)) {
    poison_call(p);
    return;
  }
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.seq.seqlen_q;
  for (std::int64_t r = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += std::int64_t{gridDim.x} * blockDim.x) {
    const int b = static_cast<int>(r / p.seq.seqlen_q), i = static_cast<int>(r % p.seq.seqlen_q);
    const Lengths l = lengths(p.seq, b);
    if (i >= l.q) continue;
    if (p.bad_pages != nullptr && p.bad_pages[b] != 0) {  // cuDNN read page 0 for a page outside the cache
      poison_row(p, b, l.q_offset, i);
      continue;
    }
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
      p.lse[lse_offset(p.layout, p.lse_strides, b, h, i, l.q_offset)] = value;
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
  if (p.bad_pages != nullptr) {
    const cudaError_t err = cudaMemsetAsync(p.bad_pages, 0, sizeof(std::int32_t) * p.graph_batch,
                                            static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  const std::int64_t n =
      p.page_table != nullptr ? static_cast<std::int64_t>(p.graph_batch) * p.max_pages : p.graph_batch + 1;
  prepare_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int launch_finish(const FinishParams& p, void* stream) {
  const std::int64_t rows = p.layout == Layout::thd
                                ? std::max<std::int64_t>(p.seq.rows_q, static_cast<std::int64_t>(p.batch) * p.seq.seqlen_q)
                                : static_cast<std::int64_t>(p.batch) * p.seq.seqlen_q;
  finish_kernel<<<blocks_for(rows), kThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace attnkit::cudnn
