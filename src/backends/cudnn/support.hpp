#pragma once
// cuDNN's SDPA forward support surface as rules on a Problem, so `check` can
// answer for a named platform (no device, no library) the way a graph build
// on that machine would. On a real device the graph build itself is the final
// word (cudnn_backend.cpp); these rules mirror the cuDNN frontend's checks
// (sdpa_support_surface.h of frontend 1.19) and cuDNN's release notes.
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/problem.hpp"

namespace attnkit::cudnn {

// Why cuDNN `version` (91900 = 9.19.0; 0: unknown, version rules skipped) on
// sm `sm` would refuse `p`: AK2113 per reason (AK2104 for dtype mismatches).
Diagnostics support_reasons(const Problem& p, int sm, int version);

}  // namespace attnkit::cudnn
