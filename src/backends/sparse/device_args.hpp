#pragma once
// What the CUDA plans of the sparse backends hand their kernels about the
// caller's BSHD / BHSD tensors: element strides between batches, tokens and
// heads (the last dim contiguous), and q, k, v with their dtype; and views of
// their own buffers in the plan's workspace.
#include <cstdint>
#include <initializer_list>

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

// A view of device memory with the given shape and element strides.
inline TensorView device_view(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                              std::initializer_list<std::int64_t> strides) {
  TensorView v = make_view(data, dtype, shape, {DeviceKind::cuda, 0});
  int i = 0;
  for (std::int64_t s : strides) v.strides[i++] = s;
  return v;
}

// A [batch, seqlen, heads, dim] buffer, stored token-major (BSHD order), as
// the view a call of `layout` (BSHD or BHSD) takes for its out.
inline TensorView bshd_buffer_view(void* data, DType dtype, Layout layout, std::int64_t batch, std::int64_t seqlen,
                                   std::int64_t heads, std::int64_t dim) {
  const std::int64_t S = seqlen, H = heads, D = dim;
  return layout == Layout::bhsd ? device_view(data, dtype, {batch, H, S, D}, {S * H * D, D, H * D, 1})
                                : device_view(data, dtype, {batch, S, H, D}, {S * H * D, H * D, D, 1});
}

}  // namespace attnkit::sparse
