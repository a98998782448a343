#pragma once
// The ring schedule: at hop s rank r computes its queries against the K/V
// block that started on rank (r - s) mod R. Each hop is a few attention calls
// between segments of the local queries and of that block; which calls, and
// with which mask, follows from where the segments sit in the sequence.
//
// Zigzag (causal): rank r holds parts r ("first") and 2R-1-r ("second") of 2R.
//   source == r:  first x first causal, second x first full, second x second causal
//   source <  r:  first x first full, second x first full   (its second part is in our future)
//   source >  r:  second x first full, second x second full (our first part precedes both)
// Every hop after the first is half of the block's work on every rank: the
// load is balanced. Contiguous chunks ("whole"): one call, masked by the
// shard's diagonal for a sliding window. Joint attention adds one call of the
// queries against the replicated text keys on the first hop.
#include <cstdint>
#include <vector>

#include "attnkit/core/problem.hpp"

namespace attnkit::dist {

enum class Segment : std::uint8_t { first, second, whole, text };
enum class HopMask : std::uint8_t { none, causal, window };

struct HopCall {
  Segment q;
  Segment k;
  HopMask mask;
  friend bool operator==(const HopCall&, const HopCall&) = default;
};

// The calls rank `ring_rank` makes on the block of rank `source`. `mask` is the
// problem's; `text_keys`: the replicated text keys are a separate segment
// (ring > 1 under joint attention), attended once, on the first hop.
std::vector<HopCall> ring_hop_calls(int ring_rank, int source, bool zigzag, MaskKind mask, bool text_keys);

// The source of rank r's block at hop s, and where r sends / receives.
inline int ring_source(int ring_rank, int hop, int ring_degree) { return ((ring_rank - hop) % ring_degree + ring_degree) % ring_degree; }

}  // namespace attnkit::dist
