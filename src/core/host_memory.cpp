#include "attnkit/core/host_memory.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <cstring>
#include <string>

namespace attnkit {

std::int64_t host_memory_available() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    std::fclose(f);
    if (kib >= 0) return static_cast<std::int64_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : INT64_MAX;
}

namespace {
Diagnostic insufficient(std::string_view what, std::string needed) {
  return diagnose("AK1013", {{"what", std::string(what)}, {"needed", std::move(needed)},
                             {"available", std::to_string(host_memory_available())}});
}
}  // namespace

Diagnostics check_host_allocation(std::string_view what, std::int64_t bytes) {
  if (bytes >= 0 && bytes <= host_memory_available()) return {};
  return insufficient(what, bytes < 0 ? "more than 2^63" : std::to_string(bytes));
}

Diagnostic host_allocation_failed(std::string_view what, std::int64_t bytes) {
  return insufficient(what, bytes < 0 ? "an unknown number of" : std::to_string(bytes));
}

int host_threads() {
  return std::clamp(omp_get_max_threads(), 1, std::max(1024, omp_get_num_procs()));
}

}  // namespace attnkit
