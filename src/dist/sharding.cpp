#include "attnkit/dist/sharding.hpp"

#include <algorithm>
#include <cstring>

namespace attnkit::dist {

TokenRange balanced_part(std::int64_t n, int parts, int index) {
  const std::int64_t lo = n * index / parts, hi = n * (index + 1) / parts;
  return {lo, hi - lo};
}

bool uses_zigzag(const Problem& p, const SequenceParallel& sp) {
  return sp.ring_degree > 1 && p.mask == MaskKind::causal;
}

std::vector<TokenRange> ring_chunk(std::int64_t n, int ring_degree, int ring_rank, bool zigzag) {
  if (!zigzag) return {balanced_part(n, ring_degree, ring_rank)};
  return {balanced_part(n, 2 * ring_degree, ring_rank), balanced_part(n, 2 * ring_degree, 2 * ring_degree - 1 - ring_rank)};
}

std::vector<TokenRange> rank_tokens(std::int64_t n, const SequenceParallel& sp, int rank, bool zigzag) {
  const std::vector<TokenRange> chunk = ring_chunk(n, sp.ring_degree, rank / sp.ulysses_degree, zigzag);
  std::int64_t chunk_len = 0;
  for (const TokenRange& r : chunk) chunk_len += r.length;
  // Piece u covers [lo, hi) of the chunk's tokens counted in order.
  const TokenRange piece = balanced_part(chunk_len, sp.ulysses_degree, rank % sp.ulysses_degree);
  std::vector<TokenRange> out;
  std::int64_t at = 0;  // chunk-order index of the current part's first token
  for (const TokenRange& r : chunk) {
    const std::int64_t lo = std::max(piece.start, at), hi = std::min(piece.start + piece.length, at + r.length);
    if (hi > lo) out.push_back({r.start + (lo - at), hi - lo});
    at += r.length;
  }
  return out;
}

Sharding::Sharding(const Problem& global, const SequenceParallel& sp, std::vector<int> q_lens, std::vector<int> k_lens)
    : global_(global), sp_(sp), zigzag_(uses_zigzag(global, sp)), q_lens_(std::move(q_lens)), k_lens_(std::move(k_lens)) {}

Sharding::Sharding(const Problem& global, const SequenceParallel& sp)
    : Sharding(global, sp, std::vector<int>(global.batch, global.seqlen_q), std::vector<int>(global.batch, global.seqlen_k)) {}

std::vector<TokenRange> Sharding::q_tokens(int rank, int b) const {
  return rank_tokens(std::max(0, q_lens_[b] - sp_.replicated_tokens), sp_, rank, zigzag_);
}
std::vector<TokenRange> Sharding::k_tokens(int rank, int b) const {
  return rank_tokens(std::max(0, k_lens_[b] - sp_.replicated_tokens), sp_, rank, zigzag_);
}

namespace {
std::int64_t total(const std::vector<TokenRange>& v) {
  std::int64_t n = 0;
  for (const TokenRange& r : v) n += r.length;
  return n;
}
}  // namespace

std::int64_t Sharding::local_q_len(int rank, int b) const { return sp_.replicated_tokens + total(q_tokens(rank, b)); }
std::int64_t Sharding::local_k_len(int rank, int b) const { return sp_.replicated_tokens + total(k_tokens(rank, b)); }

Problem Sharding::local_problem(int rank) const {
  Problem p = global_;
  std::int64_t sq = 0, sk = 0;
  for (int b = 0; b < batch(); ++b) {
    sq = std::max(sq, local_q_len(rank, b));
    sk = std::max(sk, local_k_len(rank, b));
  }
  p.seqlen_q = static_cast<int>(sq);
  p.seqlen_k = static_cast<int>(sk);
  return p;
}

std::vector<std::int32_t> local_cu_seqlens(const Sharding& s, int rank, bool k_side) {
  std::vector<std::int32_t> cu(static_cast<std::size_t>(s.batch()) + 1, 0);
  for (int b = 0; b < s.batch(); ++b)
    cu[b + 1] = cu[b] + static_cast<std::int32_t>(k_side ? s.local_k_len(rank, b) : s.local_q_len(rank, b));
  return cu;
}

namespace {

// Calls f(b, global row, local row, rows) for every run of rows of `rank`'s
// shard: the text, then the split ranges (global rows count the text too).
template <class F>
void for_each_local_run(const Sharding& s, int rank, bool k_side, F&& f) {
  const int text = s.parallel().replicated_tokens;
  for (int b = 0; b < s.batch(); ++b) {
    const int len = k_side ? s.k_len(b) : s.q_len(b);
    std::int64_t local = 0;
    if (text > 0) f(b, std::int64_t{0}, std::int64_t{0}, static_cast<std::int64_t>(std::min(text, len)));
    local += text;
    for (const TokenRange& r : k_side ? s.k_tokens(rank, b) : s.q_tokens(rank, b)) {
      f(b, text + r.start, local, r.length);
      local += r.length;
    }
  }
}

std::vector<std::int64_t> global_offsets(const Sharding& s, bool k_side) {
  std::vector<std::int64_t> off(static_cast<std::size_t>(s.batch()) + 1, 0);
  for (int b = 0; b < s.batch(); ++b) off[b + 1] = off[b] + (k_side ? s.k_len(b) : s.q_len(b));
  return off;
}

}  // namespace

HostTensor shard_tokens(const TensorView& global, Layout layout, const Sharding& s, int rank, bool k_side) {
  const std::size_t elem = dtype_size(global.dtype);
  const std::vector<std::int32_t> cu = local_cu_seqlens(s, rank, k_side);
  const std::vector<std::int64_t> gofs = global_offsets(s, k_side);
  HostTensor out;
  std::int64_t heads = 0, dim = global.shape[global.rank - 1];
  std::int64_t local_len = 0;  // padded layouts: one local length for every sequence
  for (int b = 0; b < s.batch(); ++b) local_len = std::max<std::int64_t>(local_len, cu[b + 1] - cu[b]);
  switch (layout) {
    case Layout::bshd: heads = global.shape[2]; out = HostTensor(global.dtype, {global.shape[0], local_len, heads, dim}); break;
    case Layout::bhsd: heads = global.shape[1]; out = HostTensor(global.dtype, {global.shape[0], heads, local_len, dim}); break;
    case Layout::thd: heads = global.shape[1]; out = HostTensor(global.dtype, {cu.back(), heads, dim}); break;
  }
  const TensorView& o = out.view();
  for_each_local_run(s, rank, k_side, [&](int b, std::int64_t grow, std::int64_t lrow, std::int64_t rows) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const HeadRows src = head_rows(layout, global.strides.data(), b, static_cast<int>(h), gofs[b]);
      const HeadRows dst = head_rows(layout, o.strides.data(), b, static_cast<int>(h), cu[b]);
      for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(o.bytes() + (dst.offset + (lrow + r) * dst.row_stride) * elem,
                    global.bytes() + (src.offset + (grow + r) * src.row_stride) * elem, dim * elem);
    }
  });
  return out;
}

HostTensor shard_lse(const TensorView& global, Layout layout, const Sharding& s, int rank) {
  const std::vector<std::int32_t> cu = local_cu_seqlens(s, rank, false);
  const std::vector<std::int64_t> gofs = global_offsets(s, false);
  const bool thd = layout == Layout::thd;
  const std::int64_t heads = thd ? global.shape[0] : global.shape[1];
  std::int64_t local_len = 0;
  for (int b = 0; b < s.batch(); ++b) local_len = std::max<std::int64_t>(local_len, cu[b + 1] - cu[b]);
  HostTensor out = thd ? HostTensor(DType::f32, {heads, cu.back()}) : HostTensor(DType::f32, {global.shape[0], heads, local_len});
  const TensorView& o = out.view();
  for_each_local_run(s, rank, false, [&](int b, std::int64_t grow, std::int64_t lrow, std::int64_t rows) {
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t src = thd ? h * global.strides[0] + (gofs[b] + grow + r) * global.strides[1]
                                     : b * global.strides[0] + h * global.strides[1] + (grow + r) * global.strides[2];
        const std::int64_t dst = thd ? h * o.strides[0] + (cu[b] + lrow + r) * o.strides[1]
                                     : b * o.strides[0] + h * o.strides[1] + (lrow + r) * o.strides[2];
        o.ptr<float>()[dst] = global.ptr<const float>()[src];
      }
  });
  return out;
}

HostShard make_host_shard(const HostProblemData& data, const Sharding& s, int rank) {
  const Problem& p = data.problem();
  const AttentionTensors whole = data.tensors();
  HostShard shard;
  shard.q = shard_tokens(whole.q, p.layout, s, rank, false);
  shard.k = shard_tokens(whole.k, p.layout, s, rank, true);
  shard.v = shard_tokens(whole.v, p.layout, s, rank, true);
  shard.out = shard_tokens(whole.out, p.layout, s, rank, false);  // a poisoned shape
  shard.out.poison();
  if (p.return_lse) {
    shard.lse = shard_lse(whole.lse, p.layout, s, rank);
    shard.lse.poison();
  }
  shard.tensors = whole;
  shard.tensors.q = shard.q.view();
  shard.tensors.k = shard.k.view();
  shard.tensors.v = shard.v.view();
  shard.tensors.out = shard.out.view();
  shard.tensors.lse = shard.lse.view();
  return shard;
}

}  // namespace attnkit::dist
