// libFuzzer target: the engine flags of `attnkit check` / attnkit.check(). The
// input is an argument list (one argument per line); what parses runs the
// whole selection. Paths to devices and /proc are dropped: reading them is
// the file tests' business, and a terminal would wait for input.
#include <string>
#include <vector>

#include "attnkit/select/selector.hpp"
#include "fuzz_common.hpp"
#include "select/deployment_flags.hpp"

using namespace attnkit;
using namespace attnkit::select;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string arg;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      if (arg.find("/dev") != std::string::npos || arg.find("/proc") != std::string::npos || arg.find("/sys") != std::string::npos)
        return 0;
      args.push_back(arg);
      arg.clear();
    } else {
      arg += static_cast<char>(data[i]);
    }
  }
  if (args.size() > 64) return 0;
  auto config = parse_deployment_args(args);
  if (!config) {
    fuzz::require_catalogued(config.diagnostics(), "parse_deployment_args");
    return 0;
  }
  const CheckResult r = check_deployment(*config);
  fuzz::require_catalogued(r.diagnostics, "check_deployment");
  (void)check_result_json(r);
  return 0;
}
