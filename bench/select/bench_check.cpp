// How long `attnkit check` takes for one profile: profile load (after the first,
// cached), platform parse, config parse, the whole selection and the audit.
// Target: under 50 ms per check. Prints the median and max over many runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "attnkit/select/selector.hpp"

int main(int argc, char** argv) {
  using namespace attnkit::select;
  const int runs = argc > 1 ? std::stoi(argv[1]) : 200;
  struct Case {
    const char* label;
    DeploymentConfig config;
  };
  const std::vector<Case> cases = {
      {"minimax-h3 cuda:sm90 auto", {.model = "minimax-h3", .platform = "cuda:sm90"}},
      {"minimax-h3 cuda:sm90 sparge+config", {.model = "minimax-h3", .platform = "cuda:sm90", .attention_backend = "sparge_attn",
                                               .attention_backend_config = "topk=0.5", .ulysses_degree = 2}},
      {"kimi-k3-vl cuda:sm100 mm+kv", {.model = "kimi-k3-vl", .platform = "cuda:sm100", .mm_attention_backend = "fa",
                                       .kv_cache_dtype = "fp8_e4m3"}},
  };
  // The first check also parses the embedded catalog and profiles.
  auto t0 = std::chrono::steady_clock::now();
  const bool first_ok = check_deployment(cases[0].config).ok;
  const double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("first check (cold: catalog + profiles parsed): %.3f ms (%s)\n", first_ms, first_ok ? "valid" : "invalid");
  for (const Case& c : cases) {
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
      const auto a = std::chrono::steady_clock::now();
      const CheckResult r = check_deployment(c.config);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
      if (!r.ok) {
        std::printf("%s: unexpectedly invalid\n", c.label);
        return 1;
      }
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%-40s median %.3f ms  max %.3f ms  (%d runs, target < 50 ms)\n", c.label, ms[ms.size() / 2], ms.back(), runs);
  }
  return 0;
}
