#include <gtest/gtest.h>

#include "attnkit/core/dlpack.hpp"
#include "attnkit/core/host_tensor.hpp"

namespace attnkit {
namespace {

TEST(DLPack, RoundTripKeepsPointerShapeStridesDtypeDevice) {
  HostTensor t(DType::bf16, {2, 3, 4, 8});
  TensorView v = t.view();
  v.strides[1] = 64;  // strided, not contiguous
  bool released = false;
  DLManagedTensor* m = to_dlpack(v, [&] { released = true; });
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  auto back = from_dlpack(m->dl_tensor);
  ASSERT_TRUE(back.ok()) << back.diagnostics().summary();
  EXPECT_EQ(back->data, v.data);
  EXPECT_EQ(back->dtype, DType::bf16);
  EXPECT_EQ(back->rank, 4);
  EXPECT_EQ(back->shape, v.shape);
  EXPECT_EQ(back->strides, v.strides);
  EXPECT_EQ(back->device, v.device);
  EXPECT_FALSE(released);
  m->deleter(m);
  EXPECT_TRUE(released);
}

TEST(DLPack, NullStridesMeanRowMajorAndByteOffsetIsApplied) {
  float data[24] = {};
  std::int64_t shape[] = {2, 3, 4};
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = 3;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 8;
  auto v = from_dlpack(t);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->strides[0], 12);
  EXPECT_EQ(v->strides[2], 1);
  EXPECT_EQ(v->data, static_cast<void*>(data + 2));
}

TEST(DLPack, UnsupportedInputsAreDiagnosed) {
  std::int64_t shape[] = {4};
  DLTensor t{};
  t.ndim = 1;
  t.shape = shape;
  t.device = {kDLCPU, 0};
  t.dtype = {kDLComplex, 64, 1};
  EXPECT_TRUE(from_dlpack(t).diagnostics().has_code("AK1104"));
  t.dtype = {kDLFloat, 32, 4};  // vector lanes
  EXPECT_TRUE(from_dlpack(t).diagnostics().has_code("AK1104"));
  t.dtype = {kDLFloat, 32, 1};
  t.device = {kDLVulkan, 0};
  EXPECT_TRUE(from_dlpack(t).diagnostics().has_code("AK1105"));
  std::int64_t big[] = {1, 1, 1, 1, 1, 1};
  t.device = {kDLCPU, 0};
  t.ndim = 6;
  t.shape = big;
  EXPECT_TRUE(from_dlpack(t).diagnostics().has_code("AK1102"));
}

}  // namespace
}  // namespace attnkit
