#include "fa2_variants.hpp"

#undef AK_FA2_VARIANT
#undef AK_FA3_VARIANT
#define AK_FA2_VARIANT(NAME, DIM, ...)                            \
  namespace attnkit::bench {                                      \
  int NAME##_configure();                                         \
  int NAME##_launch(const cuda::AttnParams& p, void* s);          \
  }
#define AK_FA3_VARIANT(NAME, QK, ...) AK_FA2_VARIANT(NAME, QK)
#include "selected_fa2.def"
#if defined(ATTNKIT_BENCH_FA3_VARIANTS)
#include "selected_fa3.def"
#endif
#undef AK_FA2_VARIANT
#undef AK_FA3_VARIANT

namespace attnkit::bench {
std::vector<Fa2Variant> fa2_variants() {
  return {
#define AK_FA2_VARIANT(NAME, DIM, ...) {"fa2", #NAME, DIM, &NAME##_configure, &NAME##_launch},
#define AK_FA3_VARIANT(NAME, QK, ...) {"fa3", #NAME, QK, &NAME##_configure, &NAME##_launch},
#include "selected_fa2.def"
#if defined(ATTNKIT_BENCH_FA3_VARIANTS)
#include "selected_fa3.def"
#endif
#undef AK_FA2_VARIANT
#undef AK_FA3_VARIANT
  };
}
}  // namespace attnkit::bench
