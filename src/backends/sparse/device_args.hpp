#pragma once
// What the CUDA plans of the sparse backends hand their kernels about the
// caller's BSHD / BHSD tensors: element strides between batches, tokens and
// heads (the last dim contiguous), and q, k, v with their dtype.
#include <cstdint>

#include "attnkit/core/attention_tensors.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::sparse {

// Element strides of (batch, token, head) of a BSHD or BHSD view.
inline void token_strides(Layout layout, const TensorView& v, std::int64_t (&s)[3]) {
  const bool bhsd = layout == Layout::bhsd;
  s[0] = v.strides[0], s[1] = v.strides[bhsd ? 2 : 1], s[2] = v.strides[bhsd ? 1 : 2];
}

// q, k, v's data, dtype and token strides into a kernel argument struct with
// the members q, k, v, dtype, q_strides, k_strides, v_strides.
template <class Args>
void bind_qkv(Args& a, const Problem& p, const AttentionTensors& t) {
  a.q = t.q.data, a.k = t.k.data, a.v = t.v.data;
  a.dtype = p.dtype;
  token_strides(p.layout, t.q, a.q_strides);
  token_strides(p.layout, t.k, a.k_strides);
  token_strides(p.layout, t.v, a.v_strides);
}

}  // namespace attnkit::sparse
