// The MPI communicator (host memory): blocking collectives, and the ring's
// exchange as MPI_Isend / MPI_Irecv completed by MPI_Waitall, so the transfer
// runs while the rank computes. Errors return (MPI_ERRORS_RETURN) and become
// AK5011 with MPI's own message.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "attnkit/dist/communicator.hpp"

namespace attnkit::dist {
namespace {

Diagnostics check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return {};
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return diagnose("AK5011", {{"call", call}, {"error", std::string(text, static_cast<std::size_t>(len))}});
}

// MPI counts are int: a transfer of 2 GiB or more is refused rather than truncated.
Diagnostics check_count(std::size_t bytes, const char* call) {
  if (bytes <= static_cast<std::size_t>(INT_MAX)) return {};
  return diagnose("AK5011", {{"call", call},
                             {"error", std::to_string(bytes) + " bytes in one message exceed MPI's int count (2 GiB)"}});
}

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (owned_ && !finalized()) MPI_Comm_free(&comm_);
  }

  std::string_view kind() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  DeviceKind memory() const override { return DeviceKind::cpu; }

  Diagnostics all_gather_host(const void* mine, std::size_t bytes, void* all) override {
    if (Diagnostics why = check_count(bytes * size_, "MPI_Allgather"); !why.ok()) return why;
    const int n = static_cast<int>(bytes);
    return check_mpi(MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, comm_), "MPI_Allgather");
  }

  Result<std::shared_ptr<Communicator>> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    if (Diagnostics why = check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split"); !why.ok()) return why;
    return std::shared_ptr<Communicator>(std::make_shared<MpiCommunicator>(sub, true));
  }

  Diagnostics all_to_all(const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
                         std::span<const std::size_t> recv_bytes, StreamHandle) override {
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    std::size_t s_at = 0, r_at = 0;
    for (int r = 0; r < size_; ++r) {
      for (std::size_t n : {s_at, r_at, s_at + send_bytes[r], r_at + recv_bytes[r]})
        if (Diagnostics why = check_count(n, "MPI_Alltoallv"); !why.ok()) return why;
      sc[r] = static_cast<int>(send_bytes[r]);
      sd[r] = static_cast<int>(s_at);
      rc[r] = static_cast<int>(recv_bytes[r]);
      rd[r] = static_cast<int>(r_at);
      s_at += send_bytes[r];
      r_at += recv_bytes[r];
    }
    return check_mpi(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_),
                     "MPI_Alltoallv");
  }

  Diagnostics all_gather(const std::byte* send, std::size_t bytes, std::byte* recv, StreamHandle) override {
    return all_gather_host(send, bytes, recv);
  }

  Result<Transfer> start_exchange(const std::byte* send, std::size_t send_bytes, int to, std::byte* recv,
                                  std::size_t recv_bytes, int from, StreamHandle) override {
    for (std::size_t n : {send_bytes, recv_bytes})
      if (Diagnostics why = check_count(n, "MPI_Isend/MPI_Irecv"); !why.ok()) return why;
    expected_ = recv_bytes;
    Diagnostics why = check_mpi(MPI_Irecv(recv, static_cast<int>(recv_bytes), MPI_BYTE, from, kRingTag, comm_, &requests_[0]),
                                "MPI_Irecv");
    if (why.ok())
      why = check_mpi(MPI_Isend(send, static_cast<int>(send_bytes), MPI_BYTE, to, kRingTag, comm_, &requests_[1]),
                      "MPI_Isend");
    if (!why.ok()) return why;
    return Transfer{0};
  }

  Diagnostics wait(Transfer, StreamHandle) override {
    MPI_Status status[2];
    if (Diagnostics why = check_mpi(MPI_Waitall(2, requests_, status), "MPI_Waitall"); !why.ok()) return why;
    int got = 0;
    MPI_Get_count(&status[0], MPI_BYTE, &got);
    if (static_cast<std::size_t>(got) != expected_)
      return diagnose("AK5011", {{"call", "MPI_Irecv"},
                                 {"error", "received " + std::to_string(got) + " bytes, " + std::to_string(expected_) +
                                               " expected"}});
    return {};
  }

 private:
  static constexpr int kRingTag = 0x5a17;
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::size_t expected_ = 0;
};

// MPI is initialised on first use when the program has not done it, and then
// finalised at exit (after the world communicator, which owns nothing).
Diagnostics ensure_initialised() {
  static std::once_flag once;
  static Diagnostics result;
  std::call_once(once, [] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised) return;
    int provided = 0;
    result = check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    if (result.ok()) std::atexit([] {
      if (!finalized()) MPI_Finalize();
    });
  });
  return result;
}

}  // namespace

bool mpi_compiled() { return true; }

Result<std::shared_ptr<Communicator>> mpi_world() {
  if (Diagnostics why = ensure_initialised(); !why.ok()) return why;
  static const std::shared_ptr<Communicator> world = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, false);
  return world;
}

Result<std::shared_ptr<Communicator>> mpi_from_handle(std::uintptr_t handle) {
  if (Diagnostics why = ensure_initialised(); !why.ok()) return why;
  // OpenMPI's MPI_Comm is a pointer, MPICH's an int: both fit the handle's bytes.
  static_assert(sizeof(MPI_Comm) <= sizeof(std::uintptr_t));
  MPI_Comm given;
  std::memcpy(&given, &handle, sizeof given);
  MPI_Comm mine = MPI_COMM_NULL;
  if (Diagnostics why = check_mpi(MPI_Comm_dup(given, &mine), "MPI_Comm_dup"); !why.ok()) return why;
  return std::shared_ptr<Communicator>(std::make_shared<MpiCommunicator>(mine, true));
}

}  // namespace attnkit::dist
