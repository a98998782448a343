// The NCCL communicator (GPU memory, one rank per GPU). Collectives are queued
// on the caller's stream. The ring exchange runs on a second stream of its own:
// an event recorded on the compute stream orders it after the work already
// queued there (the block it sends is complete, the buffer it receives into is
// no longer read), and wait() makes the compute stream wait on the exchange's
// event, so the host never blocks and the transfer overlaps the next compute.
// Built only with CUDA and NCCL; NCCL itself is loaded at first use
// (dist/nccl_library.hpp says why). Errors become AK5011 with NCCL's message,
// an NCCL that cannot be loaded AK5010.
#include <cuda_runtime.h>

#include <cstring>

#include "attnkit/dist/communicator.hpp"
#include "dist/nccl_library.hpp"

namespace attnkit::dist {
namespace {

// Only called once nccl_api() has loaded: a communicator exists, or the caller has just loaded it.
const NcclApi& nccl() { return **nccl_api(); }

Diagnostics check_nccl(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess) return {};
  return diagnose("AK5011", {{"call", call}, {"error", nccl().get_error_string(rc)}});
}

Diagnostics check_cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return {};
  (void)cudaGetLastError();
  return diagnose("AK5011", {{"call", call}, {"error", cudaGetErrorString(rc)}});
}

cudaStream_t as_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

class NcclCommunicator final : public Communicator {
 public:
  static Result<std::shared_ptr<Communicator>> create(ncclComm_t comm, int device) {
    auto c = std::shared_ptr<NcclCommunicator>(new NcclCommunicator(comm, device));
    if (Diagnostics why = c->init(); !why.ok()) return why;
    return std::shared_ptr<Communicator>(c);
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    for (cudaEvent_t e : ready_) if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : done_) if (e) cudaEventDestroy(e);
    if (exchange_) cudaStreamDestroy(exchange_);
    nccl().comm_destroy(comm_);
  }

  std::string_view kind() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  DeviceKind memory() const override { return DeviceKind::cuda; }

  // Through a device scratch buffer on the exchange stream, then back: small
  // and rare (agreement at plan and run time).
  Diagnostics all_gather_host(const void* mine, std::size_t bytes, void* all) override {
    cudaSetDevice(device_);
    const std::size_t need = bytes * (static_cast<std::size_t>(size_) + 1);
    if (need > scratch_bytes_) {
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      if (Diagnostics why = check_cuda(cudaMalloc(&scratch_, need), "cudaMalloc (NCCL scratch)"); !why.ok()) return why;
      scratch_bytes_ = need;
    }
    auto* send = static_cast<std::byte*>(scratch_);
    std::byte* recv = send + bytes;
    Diagnostics why = check_cuda(cudaMemcpyAsync(send, mine, bytes, cudaMemcpyHostToDevice, exchange_), "cudaMemcpyAsync");
    if (why.ok()) why = check_nccl(nccl().all_gather(send, recv, bytes, ncclUint8, comm_, exchange_), "ncclAllGather");
    if (why.ok())
      why = check_cuda(cudaMemcpyAsync(all, recv, bytes * size_, cudaMemcpyDeviceToHost, exchange_), "cudaMemcpyAsync");
    if (why.ok()) why = check_cuda(cudaStreamSynchronize(exchange_), "cudaStreamSynchronize");
    return why;
  }

  Result<std::shared_ptr<Communicator>> split(int color, int key) override {
    cudaSetDevice(device_);
    ncclComm_t sub = nullptr;
    if (Diagnostics why = check_nccl(nccl().comm_split(comm_, color, key, &sub, nullptr), "ncclCommSplit"); !why.ok())
      return why;
    return create(sub, device_);
  }

  Diagnostics all_to_all(const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
                         std::span<const std::size_t> recv_bytes, StreamHandle stream) override {
    cudaSetDevice(device_);
    Diagnostics why = check_nccl(nccl().group_start(), "ncclGroupStart");
    std::size_t s_at = 0, r_at = 0;
    for (int r = 0; r < size_ && why.ok(); ++r) {
      why = check_nccl(nccl().send(send + s_at, send_bytes[r], ncclUint8, r, comm_, as_stream(stream)), "ncclSend");
      if (why.ok()) why = check_nccl(nccl().recv(recv + r_at, recv_bytes[r], ncclUint8, r, comm_, as_stream(stream)), "ncclRecv");
      s_at += send_bytes[r];
      r_at += recv_bytes[r];
    }
    why.append(check_nccl(nccl().group_end(), "ncclGroupEnd"));
    return why;
  }

  Diagnostics all_gather(const std::byte* send, std::size_t bytes, std::byte* recv, StreamHandle stream) override {
    cudaSetDevice(device_);
    return check_nccl(nccl().all_gather(send, recv, bytes, ncclUint8, comm_, as_stream(stream)), "ncclAllGather");
  }

  Result<Transfer> start_exchange(const std::byte* send, std::size_t send_bytes, int to, std::byte* recv,
                                  std::size_t recv_bytes, int from, StreamHandle stream) override {
    cudaSetDevice(device_);
    const int slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % 2;
    Diagnostics why = check_cuda(cudaEventRecord(ready_[slot], as_stream(stream)), "cudaEventRecord");
    if (why.ok()) why = check_cuda(cudaStreamWaitEvent(exchange_, ready_[slot], 0), "cudaStreamWaitEvent");
    if (why.ok()) why = check_nccl(nccl().group_start(), "ncclGroupStart");
    if (why.ok()) why = check_nccl(nccl().send(send, send_bytes, ncclUint8, to, comm_, exchange_), "ncclSend");
    if (why.ok()) why = check_nccl(nccl().recv(recv, recv_bytes, ncclUint8, from, comm_, exchange_), "ncclRecv");
    why.append(check_nccl(nccl().group_end(), "ncclGroupEnd"));
    if (why.ok()) why = check_cuda(cudaEventRecord(done_[slot], exchange_), "cudaEventRecord");
    if (!why.ok()) return why;
    return Transfer{slot};
  }

  Diagnostics wait(Transfer t, StreamHandle stream) override {
    cudaSetDevice(device_);
    return check_cuda(cudaStreamWaitEvent(as_stream(stream), done_[t.slot], 0), "cudaStreamWaitEvent");
  }

 private:
  NcclCommunicator(ncclComm_t comm, int device) : comm_(comm), device_(device) {}

  Diagnostics init() {
    Diagnostics why = check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    if (why.ok()) why = check_nccl(nccl().comm_user_rank(comm_, &rank_), "ncclCommUserRank");
    if (why.ok()) why = check_nccl(nccl().comm_count(comm_, &size_), "ncclCommCount");
    if (why.ok()) why = check_cuda(cudaStreamCreateWithFlags(&exchange_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int i = 0; i < 2 && why.ok(); ++i) {
      why = check_cuda(cudaEventCreateWithFlags(&ready_[i], cudaEventDisableTiming), "cudaEventCreate");
      if (why.ok()) why = check_cuda(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    return why;
  }

  ncclComm_t comm_;
  int device_;
  int rank_ = 0, size_ = 1;
  cudaStream_t exchange_ = nullptr;
  cudaEvent_t ready_[2] = {nullptr, nullptr}, done_[2] = {nullptr, nullptr};
  int next_slot_ = 0;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace

bool nccl_compiled() { return true; }

Result<NcclUniqueId> nccl_unique_id() {
  if (auto api = nccl_api(); !api) return api.diagnostics();
  ncclUniqueId id;
  if (Diagnostics why = check_nccl(nccl().get_unique_id(&id), "ncclGetUniqueId"); !why.ok()) return why;
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId));
  NcclUniqueId out;
  std::memcpy(out.data(), &id, out.size());
  return out;
}

Result<std::shared_ptr<Communicator>> make_nccl_communicator(const NcclUniqueId& id, int rank, int size, int device) {
  if (auto api = nccl_api(); !api) return api.diagnostics();
  if (Diagnostics why = check_cuda(cudaSetDevice(device), "cudaSetDevice"); !why.ok())
    return diagnose("AK5010", {{"kind", "NCCL"}, {"reason", "GPU " + std::to_string(device) + ": " + why.summary()}});
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), id.size());
  ncclComm_t comm = nullptr;
  if (Diagnostics why = check_nccl(nccl().comm_init_rank(&comm, size, nid, rank), "ncclCommInitRank"); !why.ok()) return why;
  return NcclCommunicator::create(comm, device);
}

Result<std::shared_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap, int device) {
  struct Offer {
    std::int32_t ok;
    NcclUniqueId id;
  };
  Offer mine{};
  if (bootstrap.rank() == 0) {
    auto id = nccl_unique_id();
    mine.ok = id ? 1 : 0;
    if (id) mine.id = *id;
  }
  std::vector<Offer> all(static_cast<std::size_t>(bootstrap.size()));
  if (Diagnostics why = bootstrap.all_gather_host(&mine, sizeof mine, all.data()); !why.ok()) return why;
  if (!all[0].ok) return diagnose("AK5010", {{"kind", "NCCL"}, {"reason", "rank 0 could not create a unique id"}});
  return make_nccl_communicator(all[0].id, bootstrap.rank(), bootstrap.size(), device);
}

}  // namespace attnkit::dist
