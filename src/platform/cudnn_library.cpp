#include "platform/cudnn_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

// Directories where the build found libcudnn.so.9 (CMake: ATTNKIT_CUDNN_LIBRARY_DIRS),
// separated by ':'. Empty when the build looked nowhere.
#ifndef ATTNKIT_CUDNN_LIBRARY_DIRS
#define ATTNKIT_CUDNN_LIBRARY_DIRS ""
#endif

namespace attnkit {
namespace {

constexpr const char* kSoname = "libcudnn.so.9";

std::vector<std::string> split_dirs(const char* list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty()) out.push_back(dir);
  return out;
}

// cudnnGetVersion() of an opened library, 0 when the symbol is missing.
int library_version(void* handle) {
  using GetVersion = std::size_t (*)();
  auto fn = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  return fn == nullptr ? 0 : static_cast<int>(fn());
}

Result<CudnnLibrary> open_cudnn() {
  std::string tried;
  auto attempt = [&](const std::string& name, int flags, const char* label) -> void* {
    dlerror();
    void* h = dlopen(name.c_str(), flags);
    if (h == nullptr) {
      const char* err = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + label + " (" + (err ? err : "not found") + ")";
    }
    return h;
  };
  struct Candidate {
    std::string name;
    int flags;
    std::string label;
  };
  std::vector<Candidate> candidates = {{kSoname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD, "already loaded"}};
  if (const char* env = std::getenv("ATTNKIT_CUDNN_LIBRARY"); env != nullptr && *env != '\0')
    candidates.push_back({env, RTLD_NOW | RTLD_LOCAL, std::string("$ATTNKIT_CUDNN_LIBRARY=") + env});
  candidates.push_back({kSoname, RTLD_NOW | RTLD_LOCAL, "the loader's search path"});
  for (const std::string& dir : split_dirs(ATTNKIT_CUDNN_LIBRARY_DIRS))
    candidates.push_back({dir + "/" + kSoname, RTLD_NOW | RTLD_LOCAL, dir + "/" + kSoname});
  for (const Candidate& c : candidates) {
    void* h = attempt(c.name, c.flags, c.label.c_str());
    if (h == nullptr) continue;
    CudnnLibrary lib;
    lib.handle = h;
    lib.path = c.label;
    lib.version = library_version(h);
    if (lib.version < 90000) {
      tried += "; " + c.label + " (no usable cudnnGetVersion)";
      continue;  // keep the handle open: closing a library others may share is not ours to do
    }
    return lib;
  }
  return diagnose("AK2110", {{"backend", "cudnn"},
                             {"library", std::string("cuDNN 9 (") + kSoname + "; tried: " + tried + ")"},
                             {"platform", "this machine"}});
}

}  // namespace

const Result<CudnnLibrary>& cudnn_library() {
  static const Result<CudnnLibrary> lib = open_cudnn();  // thread-safe once
  return lib;
}

}  // namespace attnkit
