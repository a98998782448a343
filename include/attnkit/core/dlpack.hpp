#pragma once
// DLPack in and out. Import borrows the producer's memory (the caller keeps the
// DLManagedTensor alive); export wraps a view in a DLManagedTensor whose deleter
// calls the `release` callback the caller supplies (or nothing).
#include <functional>

#include <dlpack/dlpack.h>

#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit {

// Fails with a catalogued diagnostic, naming the tensor `name`, for unsupported
// dtypes, devices or ranks and for a tensor without its shape array.
Result<TensorView> from_dlpack(const DLTensor& t, std::string_view name = "dlpack tensor");

// The returned pointer owns a heap DLManagedTensor; its deleter frees it and
// then calls `release` (use it to drop the owner of `view.data`).
DLManagedTensor* to_dlpack(const TensorView& view, std::function<void()> release = {});

std::optional<DLDataType> to_dl_dtype(DType t);
std::optional<DType> from_dl_dtype(DLDataType t);

}  // namespace attnkit
