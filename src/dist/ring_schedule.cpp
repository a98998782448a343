#include "dist/ring_schedule.hpp"

namespace attnkit::dist {

std::vector<HopCall> ring_hop_calls(int ring_rank, int source, bool zigzag, MaskKind mask, bool text_keys) {
  using S = Segment;
  std::vector<HopCall> calls;
  if (zigzag) {
    if (source == ring_rank)
      calls = {{S::first, S::first, HopMask::causal}, {S::second, S::first, HopMask::none},
               {S::second, S::second, HopMask::causal}};
    else if (source < ring_rank)
      calls = {{S::first, S::first, HopMask::none}, {S::second, S::first, HopMask::none}};
    else
      calls = {{S::second, S::first, HopMask::none}, {S::second, S::second, HopMask::none}};
    return calls;
  }
  const HopMask m = mask == MaskKind::causal ? HopMask::causal
                    : mask == MaskKind::sliding_window ? HopMask::window
                                                       : HopMask::none;
  calls.push_back({S::whole, S::whole, m});
  if (text_keys && source == ring_rank) calls.push_back({S::whole, S::text, HopMask::none});
  return calls;
}

}  // namespace attnkit::dist
