#include "attnkit/sparse/hybrid_window.hpp"

namespace attnkit::sparse {

HybridWindowSettings hybrid_window_settings(const select::BackendConfig& config) {
  HybridWindowSettings s;
  if (auto w = select::config_int_list(config, "window_size"))
    s.window = {static_cast<int>((*w)[0]), static_cast<int>((*w)[1])};
  return s;
}

Window hybrid_softmax_window(const Problem& p, const HybridWindowSettings& s) {
  if (p.mask == MaskKind::sliding_window) return p.window;
  if (p.mask == MaskKind::causal) return {s.window.left, 0};
  return s.window;
}

Problem hybrid_softmax_problem(const Problem& p, const HybridWindowSettings& s) {
  Problem w = p;
  w.has_gate = false;
  w.mask = MaskKind::sliding_window;
  w.window = hybrid_softmax_window(p, s);
  return w;
}

}  // namespace attnkit::sparse
