#pragma once
// libcudnn.so.9, found and opened at run time (never linked), so a binary built
// with the cudnn backend still starts on a machine without cuDNN and reports
// why the backend cannot run. One loader for the whole process: Platform
// detection reads the version from it, the cudnn backend hands its handle to
// the cuDNN frontend.
#include <string>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit {

struct CudnnLibrary {
  void* handle = nullptr;  // dlopen handle of libcudnn.so.9 (never closed)
  std::string path;        // where it was found ("already loaded" when the process had it)
  int version = 0;         // cudnnGetVersion(): 91900 for 9.19.0
};

// Opens libcudnn.so.9 on first use, trying in order: a copy the process has
// already loaded (PyTorch's), $ATTNKIT_CUDNN_LIBRARY, the dynamic loader's
// search path, then the directories found at build time (the CUDA toolkit's
// lib dir, Python's site-packages/nvidia/cudnn/lib). AK2110 with every place
// tried when none works.
const Result<CudnnLibrary>& cudnn_library();

}  // namespace attnkit
