// libFuzzer target: --attention-backend-config in all its forms. The input is
// the flag's text (k=v pairs, a JSON string) and, through a memfd path, the
// contents of a JSON or YAML file; whatever parses is validated against every
// backend schema.
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "attnkit/select/config.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;
using namespace attnkit::select;

namespace {

void parse_and_validate(const std::string& text) {
  auto parsed = parse_backend_config(text);
  if (!parsed) {
    fuzz::require_catalogued(parsed.diagnostics(), "parse_backend_config");
    return;
  }
  std::vector<const BackendSchema*> schemas;
  for (const BackendSchema& s : backend_schemas()) schemas.push_back(&s);
  fuzz::require_catalogued(validate_config(parsed->values, schemas, "fuzz"), "validate_config");
  for (const auto& [key, value] : parsed->values) (void)config_value_text(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse_and_validate(text);  // as the flag's own text
  // As a file's contents: a path without an extension reads JSON or YAML by its first character.
  const int fd = memfd_create("attnkit_fuzz_config", MFD_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, data, size) == static_cast<ssize_t>(size)) parse_and_validate("/proc/self/fd/" + std::to_string(fd));
    close(fd);
  }
  return 0;
}
