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

// One entry point into `slot`; the first missing one names the problem.
template <class F>
void bind(void* library, const char* symbol, F& slot, std::string& problem) {
  slot = reinterpret_cast<F>(dlsym(library, symbol));
  if (slot == nullptr && problem.empty()) problem = std::string("it has no ") + symbol;
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
  std::string problem;
#define ATTNKIT_NCCL_BIND(member, symbol) bind(library, #symbol, out.api.member, problem);
  ATTNKIT_NCCL_ENTRY_POINTS(ATTNKIT_NCCL_BIND)
#undef ATTNKIT_NCCL_BIND
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
