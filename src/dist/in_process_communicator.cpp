// The in-process group: ranks are threads of one process, collectives meet at
// a barrier and copy straight between the ranks' buffers. For tests (the ring
// schedule without MPI) and for several ranks on one GPU (cudaMemcpy).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "attnkit/dist/communicator.hpp"
#include "dist/device_ops.hpp"

namespace attnkit::dist {
namespace {

// What the ranks of one group share.
struct Group {
  explicit Group(int n, DeviceKind m) : size(n), memory(m), published(n), sizes(n), mailbox(n) {}
  const int size;
  const DeviceKind memory;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::vector<const void*> published;  // each rank's buffer for the collective in progress
  std::vector<const std::size_t*> sizes;
  std::map<int, std::shared_ptr<Group>> children;  // split(): one new group per color

  // Point-to-point: messages waiting at their destination, keyed by source.
  struct Message {
    const std::byte* data = nullptr;
    std::size_t bytes = 0;
    bool taken = false;
  };
  std::vector<std::map<int, std::shared_ptr<Message>>> mailbox;

  void barrier() {
    std::unique_lock lock(mutex);
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen; });
  }
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  std::string_view kind() const override { return "in_process"; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  DeviceKind memory() const override { return group_->memory; }

  Diagnostics all_gather_host(const void* mine, std::size_t bytes, void* all) override {
    group_->published[rank_] = mine;
    group_->barrier();
    for (int r = 0; r < size(); ++r)
      std::memcpy(static_cast<std::byte*>(all) + r * bytes, group_->published[r], bytes);
    group_->barrier();  // nobody leaves (and reuses `mine`) before all have read it
    return {};
  }

  Result<std::shared_ptr<Communicator>> split(int color, int key) override {
    const int mine[2] = {color, key};
    std::vector<int> all(2 * static_cast<std::size_t>(size()));
    all_gather_host(mine, sizeof mine, all.data());
    std::vector<std::pair<int, int>> members;  // (key, rank) of my color
    for (int r = 0; r < size(); ++r)
      if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
    std::sort(members.begin(), members.end());
    const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), std::pair{key, rank_}) - members.begin());
    if (new_rank == 0) {
      std::lock_guard lock(group_->mutex);
      group_->children[color] = std::make_shared<Group>(static_cast<int>(members.size()), memory());
    }
    group_->barrier();
    std::shared_ptr<Group> child;
    {
      std::lock_guard lock(group_->mutex);
      child = group_->children.at(color);
    }
    group_->barrier();
    if (new_rank == 0) {
      std::lock_guard lock(group_->mutex);
      group_->children.erase(color);
    }
    return std::shared_ptr<Communicator>(std::make_shared<InProcessCommunicator>(child, new_rank));
  }

  Diagnostics all_to_all(const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
                         std::span<const std::size_t> recv_bytes, StreamHandle stream) override {
    if (Diagnostics why = sync(stream); !why.ok()) return why;
    group_->published[rank_] = send;
    group_->sizes[rank_] = send_bytes.data();
    group_->barrier();
    Diagnostics why;
    std::size_t at = 0;
    for (int r = 0; r < size() && why.ok(); ++r) {
      std::size_t offset = 0;  // where rank r's block for me starts in its send buffer
      for (int q = 0; q < rank_; ++q) offset += group_->sizes[r][q];
      if (group_->sizes[r][rank_] != recv_bytes[r])
        why.add("AK5011", {{"call", "in-process all_to_all"},
                           {"error", "rank " + std::to_string(r) + " sends " + std::to_string(group_->sizes[r][rank_]) +
                                         " bytes, " + std::to_string(recv_bytes[r]) + " expected"}});
      else
        why.append(copy(recv + at, static_cast<const std::byte*>(group_->published[r]) + offset, recv_bytes[r]));
      at += recv_bytes[r];
    }
    group_->barrier();
    return why;
  }

  Diagnostics all_gather(const std::byte* send, std::size_t bytes, std::byte* recv, StreamHandle stream) override {
    if (Diagnostics why = sync(stream); !why.ok()) return why;
    group_->published[rank_] = send;
    group_->barrier();
    Diagnostics why;
    for (int r = 0; r < size(); ++r)
      why.append(copy(recv + r * bytes, static_cast<const std::byte*>(group_->published[r]), bytes));
    group_->barrier();
    return why;
  }

  Result<Transfer> start_exchange(const std::byte* send, std::size_t send_bytes, int to, std::byte* recv,
                                  std::size_t recv_bytes, int from, StreamHandle stream) override {
    if (Diagnostics why = sync(stream); !why.ok()) return why;
    auto message = std::make_shared<Group::Message>(Group::Message{send, send_bytes, false});
    {
      std::lock_guard lock(group_->mutex);
      group_->mailbox[to][rank_] = message;
    }
    group_->cv.notify_all();
    pending_ = {message, recv, recv_bytes, from, to};
    return Transfer{0};
  }

  Diagnostics wait(Transfer, StreamHandle) override {
    std::shared_ptr<Group::Message> incoming;
    {
      std::unique_lock lock(group_->mutex);
      auto& box = group_->mailbox[rank_];
      group_->cv.wait(lock, [&] { return box.count(pending_.from) > 0; });
      incoming = box[pending_.from];
      box.erase(pending_.from);
    }
    Diagnostics why;
    if (incoming->bytes != pending_.recv_bytes)
      why.add("AK5011", {{"call", "in-process exchange"},
                         {"error", "rank " + std::to_string(pending_.from) + " sent " + std::to_string(incoming->bytes) +
                                       " bytes, " + std::to_string(pending_.recv_bytes) + " expected"}});
    else
      why = copy(pending_.recv, incoming->data, incoming->bytes);
    {
      std::lock_guard lock(group_->mutex);
      incoming->taken = true;
    }
    group_->cv.notify_all();
    // My own send must be read before the caller may overwrite it.
    std::unique_lock lock(group_->mutex);
    group_->cv.wait(lock, [&] { return pending_.sent->taken; });
    return why;
  }

 private:
  Diagnostics sync(StreamHandle stream) const {
    auto ops = ops_for(memory());
    if (!ops) return ops.diagnostics();
    return (*ops)->synchronize(stream);
  }
  Diagnostics copy(std::byte* dst, const std::byte* src, std::size_t bytes) const {
    auto ops = ops_for(memory());
    if (!ops) return ops.diagnostics();
    Diagnostics why = (*ops)->copy_bytes(dst, src, bytes, nullptr);
    if (why.ok()) why = (*ops)->synchronize(nullptr);
    return why;
  }

  struct Pending {
    std::shared_ptr<Group::Message> sent;
    std::byte* recv = nullptr;
    std::size_t recv_bytes = 0;
    int from = 0, to = 0;
  };
  std::shared_ptr<Group> group_;
  int rank_;
  Pending pending_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_in_process_group(int size, DeviceKind memory) {
  auto group = std::make_shared<Group>(size, memory);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<InProcessCommunicator>(group, r));
  return out;
}

}  // namespace attnkit::dist
