#pragma once
// What every attnkit fuzz target asserts beyond "no crash, no sanitizer report":
// a refusal is catalogued (never AK0000 / AK0003) and carries a fix.
#include <cstdio>
#include <cstdlib>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit::fuzz {

inline void require_catalogued(const Diagnostics& why, const char* where) {
  for (const Diagnostic& d : why) {
    if (d.code == "AK0000" || d.code == "AK0003" || find_catalog_entry(d.code) == nullptr || d.solutions.empty()) {
      std::fprintf(stderr, "%s: uncatalogued refusal %s: %s\n", where, d.code.c_str(), d.message.c_str());
      std::abort();
    }
  }
}

}  // namespace attnkit::fuzz
