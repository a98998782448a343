#pragma once
// NCCL, loaded at first use (dlopen) rather than linked. A process that
// already holds an NCCL keeps it and attnkit calls that one: torch's wheels
// bring a newer libnccl.so.2 than the CUDA toolkit's, and with attnkit linked
// to the toolkit's, `import attnkit; import torch` failed (libtorch_cuda.so:
// undefined symbol ncclCommResume; torch 2.15+cu132, 2026-12-01), because the
// loader reuses the library already loaded under the shared soname.
#include <nccl.h>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit::dist {

// The NCCL entry points the communicator calls.
struct NcclApi {
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommSplit) comm_split = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommUserRank) comm_user_rank = nullptr;
  decltype(&ncclCommCount) comm_count = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

// The process's NCCL (one already loaded, else libnccl.so.2 from the library
// path, else the one this build was configured with), loaded once; AK5010
// naming the library and the missing entry point when it cannot be.
Result<const NcclApi*> nccl_api();

}  // namespace attnkit::dist
