#include "fa2_variants.hpp"

#undef AK_FA2_VARIANT
#define AK_FA2_VARIANT(NAME, DIM, ...)                            \
  namespace attnkit::bench {                                      \
  int NAME##_configure();                                         \
  int NAME##_launch(const cuda::AttnParams& p, void* s);          \
  }
#include "fa2_variants.def"
#undef AK_FA2_VARIANT

namespace attnkit::bench {
std::vector<Fa2Variant> fa2_variants() {
  return {
#define AK_FA2_VARIANT(NAME, DIM, ...) {#NAME, DIM, &NAME##_configure, &NAME##_launch},
#include "fa2_variants.def"
#undef AK_FA2_VARIANT
  };
}
}  // namespace attnkit::bench
