// libFuzzer target: model profiles (`--model PATH.yaml`). Whatever parses is
// selected for on a Hopper and on the CPU, with the engine flags that switch
// the profile's rules on.
#include <string>

#include "attnkit/select/selector.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;
using namespace attnkit::select;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto profile = parse_profile(text, "fuzz");
  if (!profile) {
    fuzz::require_catalogued(profile.diagnostics(), "parse_profile");
    return 0;
  }
  for (const char* platform : {"cuda:sm90", "cpu"})
    for (int ring : {1, 2}) {
      DeploymentConfig c;
      c.model = profile->name;
      c.platform = platform;
      c.ring_degree = ring;
      Engine engine(c, *profile);
      engine.set_log_sink(nullptr);
      const CheckResult& r = engine.build();
      fuzz::require_catalogued(r.diagnostics, "Engine::build");
      if (r.ok) {
        auto request = engine.prepare({"fa", std::nullopt});
        if (!request) fuzz::require_catalogued(request.diagnostics(), "Engine::prepare");
      }
    }
  return 0;
}
