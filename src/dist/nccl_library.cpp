#include "dist/nccl_library.hpp"

#include <dlfcn.h>

#include <string>

namespace attnkit::dist {
namespace {

// Where to look, in order: the soname first, so that an NCCL the process has
// already loaded (torch's) is the one used; then the configured library.
constexpr const char* kCandidates[] = {"libnccl.so.2",
#if defined(ATTNKIT_NCCL_LIBRARY)
                                       ATTNKIT_NCCL_LIBRARY
#endif
};

struct Loaded {
  NcclApi api;
  std::string problem;  // empty: loaded
};

template <class F>
bool bind(void* library, const char* symbol, F& slot, std::string& problem) {
  slot = reinterpret_cast<F>(dlsym(library, symbol));
  if (slot == nullptr && problem.empty()) problem = std::string("it has no ") + symbol;
  return slot != nullptr;
}

Loaded load() {
  Loaded out;
  void* library = nullptr;
  std::string tried;
  for (const char* name : kCandidates) {
    if ((library = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    const char* why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (why != nullptr ? why : name);
  }
  if (library == nullptr) {
    out.problem = "NCCL could not be loaded (" + tried + ")";
    return out;
  }
  NcclApi& a = out.api;
  std::string problem;
  bind(library, "ncclGetErrorString", a.get_error_string, problem);
  bind(library, "ncclGetUniqueId", a.get_unique_id, problem);
  bind(library, "ncclCommInitRank", a.comm_init_rank, problem);
  bind(library, "ncclCommSplit", a.comm_split, problem);
  bind(library, "ncclCommDestroy", a.comm_destroy, problem);
  bind(library, "ncclCommUserRank", a.comm_user_rank, problem);
  bind(library, "ncclCommCount", a.comm_count, problem);
  bind(library, "ncclAllGather", a.all_gather, problem);
  bind(library, "ncclSend", a.send, problem);
  bind(library, "ncclRecv", a.recv, problem);
  bind(library, "ncclGroupStart", a.group_start, problem);
  bind(library, "ncclGroupEnd", a.group_end, problem);
  if (!problem.empty()) out.problem = "the loaded NCCL is too old: " + problem + " (attnkit needs NCCL 2.18 or newer)";
  return out;
}

}  // namespace

Result<const NcclApi*> nccl_api() {
  static const Loaded loaded = load();  // thread-safe once; never unloaded (communicators may outlive callers)
  if (!loaded.problem.empty()) return diagnose("AK5010", {{"kind", "NCCL"}, {"reason", loaded.problem}});
  return &loaded.api;
}

}  // namespace attnkit::dist
