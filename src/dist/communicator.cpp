// What every communicator shares: the agreement before data moves, and the
// mpirun probe.
#include <cstdlib>
#include <cstring>

#include "attnkit/dist/communicator.hpp"

namespace attnkit::dist {

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

Diagnostics agree(Communicator& comm, const Diagnostics& mine, std::uint64_t fingerprint) {
  struct Verdict {
    std::uint64_t fingerprint;
    std::int32_t refused;
    char code[12];
  };
  Verdict v{};
  v.fingerprint = fingerprint;
  v.refused = mine.ok() ? 0 : 1;
  for (const Diagnostic& d : mine)
    if (d.severity == Severity::error) {
      std::strncpy(v.code, d.code.c_str(), sizeof v.code - 1);
      break;
    }
  std::vector<Verdict> all(static_cast<std::size_t>(comm.size()));
  if (Diagnostics why = comm.all_gather_host(&v, sizeof v, all.data()); !why.ok()) return why;
  if (!mine.ok()) return mine;
  for (int r = 0; r < comm.size(); ++r)
    if (all[r].refused)
      return diagnose("AK5009", {{"rank", std::to_string(r)}, {"code", all[r].code}, {"me", std::to_string(comm.rank())}});
  for (int r = 0; r < comm.size(); ++r)
    if (all[r].fingerprint != fingerprint)
      return diagnose("AK5012", {{"rank", std::to_string(r)}, {"me", std::to_string(comm.rank())}});
  return mine;
}

}  // namespace attnkit::dist
