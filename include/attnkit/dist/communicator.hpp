#pragma once
// Communicators: the transports sequence parallelism runs on. MPI between CPU
// processes, NCCL between GPUs (one rank per GPU), and an in-process group of
// threads for tests. attnkit has no transport of its own; it calls the engines
// users already run, and every failure of theirs becomes a catalogued
// diagnostic (AK5010 unavailable, AK5011 a call failed).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/core/diagnostic.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit::dist {

// A started ring exchange, finished by Communicator::wait.
struct Transfer {
  int slot = -1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view kind() const = 0;  // "mpi", "nccl", "in_process"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the buffers of the transfers below live: cpu (MPI), cuda (NCCL), either (in-process).
  virtual DeviceKind memory() const = 0;

  // Blocking, host memory: every rank's `bytes` from `mine`, in rank order, into
  // `all` (size() * bytes). How ranks agree before they exchange data.
  virtual Diagnostics all_gather_host(const void* mine, std::size_t bytes, void* all) = 0;
  // The ranks passing the same `color`, ordered by `key`. Collective.
  virtual Result<std::shared_ptr<Communicator>> split(int color, int key) = 0;

  // Transfers of memory() buffers: queued on `stream` (NCCL) or done on return
  // (MPI, in-process). Block r of `send` (send_bytes[r] bytes, blocks packed in
  // rank order) goes to rank r; block r of `recv` comes from rank r.
  virtual Diagnostics all_to_all(const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
                                 std::span<const std::size_t> recv_bytes, StreamHandle stream) = 0;
  // Every rank's `bytes` bytes from `send`, in rank order, into `recv`.
  virtual Diagnostics all_gather(const std::byte* send, std::size_t bytes, std::byte* recv, StreamHandle stream) = 0;
  // Starts sending `send` to rank `to` and receiving into `recv` from rank `from`
  // once the work already queued on `stream` is done; returns at once (MPI:
  // non-blocking calls; NCCL: a second stream ordered by events).
  virtual Result<Transfer> start_exchange(const std::byte* send, std::size_t send_bytes, int to, std::byte* recv,
                                          std::size_t recv_bytes, int from, StreamHandle stream) = 0;
  // Work queued on `stream` after this sees the received data, and `send` may be
  // overwritten (NCCL: an event wait, the host returns at once; MPI: MPI_Waitall).
  virtual Diagnostics wait(Transfer transfer, StreamHandle stream) = 0;
};

// `size` communicators of one process, rank r at index r: each rank runs on its
// own thread. Transfers copy between the ranks' buffers (cudaMemcpy for cuda),
// so the ring schedule runs on one machine, or on one GPU, without MPI or NCCL.
std::vector<std::shared_ptr<Communicator>> make_in_process_group(int size, DeviceKind memory = DeviceKind::cpu);

// Whether this binary was built with the MPI / NCCL communicators.
bool mpi_compiled();
bool nccl_compiled();
// True when this process was started by mpirun (OpenMPI or MPICH environment).
bool launched_by_mpirun();
// MPI_COMM_WORLD, initialising MPI on first use when the program has not (and
// finalising it at exit); AK5010 when MPI is not compiled in.
Result<std::shared_ptr<Communicator>> mpi_world();
// Wraps an existing MPI_Comm given as its integer handle (mpi4py:
// MPI._handleof(comm)); the communicator is duplicated, the caller keeps its own.
Result<std::shared_ptr<Communicator>> mpi_from_handle(std::uintptr_t handle);

// NCCL, one rank per GPU. The unique id is made by one rank and shared by the
// caller's own means (torch.distributed broadcast, MPI, a file).
using NcclUniqueId = std::array<std::uint8_t, 128>;
Result<NcclUniqueId> nccl_unique_id();
Result<std::shared_ptr<Communicator>> make_nccl_communicator(const NcclUniqueId& id, int rank, int size, int device);
// Bootstraps NCCL over `bootstrap` (e.g. mpi_world()): rank 0 makes the id and
// every rank gets it through all_gather_host. Collective over `bootstrap`.
Result<std::shared_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap, int device);

// Agreement before any data moves: every rank passes its own verdict (and a
// fingerprint of what must be equal everywhere, e.g. the sequence lengths).
// Returns `mine` where it failed; on the other ranks AK5009 naming the first
// rank that refused; AK5012 everywhere when the fingerprints differ. Collective.
Diagnostics agree(Communicator& comm, const Diagnostics& mine, std::uint64_t fingerprint = 0);

}  // namespace attnkit::dist
