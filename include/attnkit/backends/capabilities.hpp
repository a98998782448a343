#pragma once
// What a backend declares it can run. The generic check turns every mismatch
// with a Problem/Platform into a catalogued reason; nothing is a bare bool.
#include <string>
#include <vector>

#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/dtype.hpp"
#include "attnkit/core/enum_set.hpp"
#include "attnkit/core/problem.hpp"
#include "attnkit/platform/platform.hpp"

namespace attnkit {

struct Capabilities {
  EnumSet<PlatformKind> platforms;
  int min_sm = 0;  // CUDA only; 0: no bound
  int max_sm = 0;  // CUDA only; 0: no bound (e.g. 99 for an sm_90-only kernel)
  DTypeSet dtypes;  // of q (and k/v)
  DTypeSet kv_dtypes;  // empty: same set as dtypes
  // Head dims with a kernel compiled (empty: any dim from 1 to max_head_dim).
  std::vector<int> head_dims;
  int max_head_dim = 256;
  bool distinct_v_head_dim = true;  // head_dim_v may differ from head_dim_qk
  EnumSet<MaskKind> masks;
  EnumSet<Layout> layouts;
  bool gqa = true;
  bool softcap = true;
  bool sinks = true;
  bool gate = false;  // reads Problem::has_gate's gate (a backend with a gated second branch)
  bool lse = true;  // returns the LSE: what makes a backend ring-capable (ring_capable())
  bool paged_kv = false;
  bool diagonal_offsets = false;  // Problem::diagonal_offsets (sliding windows of ring shards)
  bool block_sparse = false;      // Problem::block_sparse: CSR lists of key blocks per query block
  bool sparse = false;
  // A sparse backend runs problems shorter than this many queries, or with
  // seqlen_q != seqlen_k, as dense attention inside (0: no such limit).
  int dense_below_seqlen = 0;
  bool switchable_per_request = true;
  bool skip_softmax = false;  // the kernel implements request-scoped skip-softmax (CallContext)
  // Checkpoint features (select/profile.hpp: CheckpointFeature) the backend
  // cannot run without, and those it reads when the checkpoint has them.
  std::vector<std::string> requires_weights;
  std::vector<std::string> uses_weights;
  std::string required_library;  // "cudnn", "nccl", ... (empty: none)
  bool built = true;  // false: modelled for validation only, no kernel in this binary
  bool auto_selectable = true;  // false: only when named (e.g. `reference`)
};

// Ring attention merges partial results by their LSE (design 4), so any
// backend that returns the LSE can compute a ring hop.
constexpr bool ring_capable(const Capabilities& caps) { return caps.lse; }

// Every way `p` on `platform` falls outside `caps`, for the backend `name`.
Diagnostics check_capabilities(std::string_view name, const Capabilities& caps, const Problem& p,
                               const Platform& platform);

}  // namespace attnkit
