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

// The NCCL entry points the communicator calls, as (member, symbol): the one
// list both the struct and the loader read.
#define ATTNKIT_NCCL_ENTRY_POINTS(X)                                                                   \
  X(get_error_string, ncclGetErrorString) X(get_unique_id, ncclGetUniqueId)                            \
  X(comm_init_rank, ncclCommInitRank) X(comm_split, ncclCommSplit) X(comm_destroy, ncclCommDestroy)    \
  X(comm_user_rank, ncclCommUserRank) X(comm_count, ncclCommCount) X(all_gather, ncclAllGather)        \
  X(send, ncclSend) X(recv, ncclRecv) X(group_start, ncclGroupStart) X(group_end, ncclGroupEnd)

struct NcclApi {
#define ATTNKIT_NCCL_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
  ATTNKIT_NCCL_ENTRY_POINTS(ATTNKIT_NCCL_MEMBER)
#undef ATTNKIT_NCCL_MEMBER
};

// The process's NCCL (one already loaded, else libnccl.so.2 from the library
// path, else the one this build was configured with), loaded once; AK5010
// naming the library and the missing entry point when it cannot be.
Result<const NcclApi*> nccl_api();

}  // namespace attnkit::dist
