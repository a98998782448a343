// The USP plan: Ulysses all-to-all (inner) around ring attention (outer), on
// top of an inner backend's plans. One run:
//
//   1 agree        every rank's binding checked; a refusal anywhere stops all
//   2 scatter      this rank's q/k/v shard -> ring-local buffers of its heads
//                  (Ulysses: one all-to-all of q, k and v packed; the text is
//                  sliced to the local heads without communication)
//   3 ring         R hops; at hop s the block of rank (r - s) mod R is computed
//                  while the next one is received into the other buffer
//                  (start_exchange before, wait after); partial results are
//                  merged into an fp32 accumulator by their LSE
//   4 gather       the accumulator -> this rank's out/lse rows (Ulysses: the
//                  inverse all-to-all, and an all-gather of the text rows)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "attnkit/dist/sequence_parallel.hpp"
#include "dist/device_ops.hpp"
#include "dist/ring_local_layout.hpp"

namespace attnkit::dist {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Runs `f` (a blocking transfer, an inner run), adding its host time to `ms`.
template <class F>
Diagnostics timed(double& ms, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  Diagnostics why = f();
  ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return why;
}

TensorView make_tensor(const void* data, DType dtype, Device device, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides) {
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape.begin());
  std::copy(strides.begin(), strides.end(), v.strides.begin());
  return v;
}

// Plan-time constants of one rank.
struct Geometry {
  Problem global;
  SequenceParallel sp;
  int R = 1, U = 1, rank = 0, ring_rank = 0, uly_rank = 0;
  int B = 1, hq = 1, hkv = 1, dqk = 1, dv = 1, text = 0;
  DType in = DType::bf16, out = DType::bf16;
  std::size_t in_elem = 2, out_elem = 2;
  bool zigzag = false, dense = true;
  bool text_apart = false;  // ring > 1 under joint attention: text keys in their own buffer, attended once
  bool merged = false;      // ring > 1: partials merged into an fp32 accumulator
  DType result_dtype = DType::f32;
  bool result_lse = false;   // the result keeps an LSE (merged, or asked for)
  DType partial_dtype = DType::f32;
  Device device{};
};

// Token rows of a user tensor: sequence b's local row t, head h is element
// seq[b] + t * row + h * head.
struct UserRows {
  std::vector<std::int64_t> seq;
  std::int64_t row = 0, head = 0;
};

UserRows user_rows(const TensorView& t, Layout layout, const std::vector<std::int32_t>& local_cu) {
  UserRows u;
  const int B = static_cast<int>(local_cu.size()) - 1;
  for (int b = 0; b < B; ++b) u.seq.push_back(head_rows(layout, t.strides.data(), b, 0, local_cu[b]).offset);
  u.row = head_rows(layout, t.strides.data(), 0, 0, 0).row_stride;
  u.head = layout == Layout::bshd ? t.strides[2] : t.strides[1];
  return u;
}

UserRows user_lse_rows(const TensorView& t, Layout layout, const std::vector<std::int32_t>& local_cu) {
  UserRows u;
  const int B = static_cast<int>(local_cu.size()) - 1;
  const bool thd = layout == Layout::thd;
  for (int b = 0; b < B; ++b) u.seq.push_back(thd ? local_cu[b] * t.strides[1] : b * t.strides[0]);
  u.row = thd ? t.strides[1] : t.strides[2];
  u.head = thd ? t.strides[0] : t.strides[1];
  return u;
}

// Everything that depends on the sequence lengths: fixed at plan time for
// padded layouts, rebuilt per run for packed ones.
struct RunLayout {
  std::vector<int> q_lens, k_lens;
  std::optional<Sharding> sharding;
  BufferLayout q;                 // this rank's queries
  std::vector<BufferLayout> kv;   // the K/V block of every ring rank
  SegmentRows text;               // text keys apart (Geometry::text_apart)
  std::vector<std::int32_t> local_cu_q, local_cu_k;  // this rank's packing
  std::vector<std::int64_t> member_q, member_k;      // split tokens of every Ulysses member of this group
  std::vector<std::int32_t> meta;  // every THD segment's cu, concatenated, for the device
  std::uint64_t fingerprint = 0;
};

// Buffer sizes, in rows / tokens: exact for padded layouts, bounds for packed ones.
struct Capacity {
  std::int64_t q_rows = 0, kv_rows = 0, text_rows = 0, tok_q = 0, tok_k = 0;
  std::size_t meta_ints = 0;
};

std::uint64_t fingerprint_of(const std::vector<int>& a, const std::vector<int>& b) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the lengths
  for (const auto* v : {&a, &b})
    for (int x : *v) h = (h ^ static_cast<std::uint32_t>(x)) * 1099511628211ull;
  return h;
}

RunLayout build_layout(const Geometry& g, std::vector<int> q_lens, std::vector<int> k_lens) {
  RunLayout L;
  L.sharding.emplace(g.global, g.sp, q_lens, k_lens);
  L.fingerprint = fingerprint_of(q_lens, k_lens);
  L.q_lens = std::move(q_lens);
  L.k_lens = std::move(k_lens);
  L.q = ring_local_layout(L.q_lens, g.text, g.R, g.ring_rank, g.zigzag, true);
  for (int x = 0; x < g.R; ++x) L.kv.push_back(ring_local_layout(L.k_lens, g.text, g.R, x, g.zigzag, !g.text_apart));
  if (g.text_apart) L.text = text_segment(g.B, g.text);
  L.local_cu_q = local_cu_seqlens(*L.sharding, g.rank, false);
  L.local_cu_k = local_cu_seqlens(*L.sharding, g.rank, true);
  for (int u = 0; u < g.U; ++u) {
    const int member = g.ring_rank * g.U + u;
    std::int64_t nq = 0, nk = 0;
    for (int b = 0; b < g.B; ++b) {
      nq += L.sharding->local_q_len(member, b) - g.text;
      nk += L.sharding->local_k_len(member, b) - g.text;
    }
    L.member_q.push_back(nq);
    L.member_k.push_back(nk);
  }
  if (!g.dense) {
    auto add = [&](SegmentRows& s) {
      s.meta = static_cast<std::int64_t>(L.meta.size());
      L.meta.insert(L.meta.end(), s.cu.begin(), s.cu.end());
    };
    for (SegmentRows* s : {&L.q.first, &L.q.second, &L.q.whole}) add(*s);
    for (BufferLayout& kv : L.kv)
      for (SegmentRows* s : {&kv.first, &kv.second, &kv.whole}) add(*s);
  }
  return L;
}

Capacity capacity_of(const Geometry& g, const RunLayout* exact) {
  Capacity c;
  if (exact != nullptr) {
    c.q_rows = exact->q.rows;
    for (const BufferLayout& kv : exact->kv) c.kv_rows = std::max(c.kv_rows, kv.rows);
    c.text_rows = exact->text.rows;
    for (std::int64_t n : exact->member_q) c.tok_q = std::max(c.tok_q, n);
    for (std::int64_t n : exact->member_k) c.tok_k = std::max(c.tok_k, n);
    return c;
  }
  // Packed: every part of n split in k is at most ceil(n / k) long.
  auto chunk = [&](std::int64_t n) { return g.zigzag ? 2 * ceil_div(n, 2 * g.R) : ceil_div(n, g.R); };
  c.q_rows = g.B * chunk(g.global.seqlen_q);
  c.kv_rows = g.B * chunk(g.global.seqlen_k);
  c.tok_q = g.B * ceil_div(chunk(g.global.seqlen_q), g.U);
  c.tok_k = g.B * ceil_div(chunk(g.global.seqlen_k), g.U);
  c.meta_ints = static_cast<std::size_t>(3 * (g.R + 1)) * (g.B + 1);
  return c;
}

// Byte offsets of every buffer in the workspace.
struct WorkspaceLayout {
  std::size_t send = 0, recv = 0, a2a_bytes = 0;  // Ulysses all-to-all (both directions)
  std::size_t q = 0, kv[2] = {0, 0}, text_kv = 0;
  std::size_t result = 0, result_lse = 0, partial = 0, partial_lse = 0;
  std::size_t text_send = 0, text_recv = 0, text_section = 0;
  std::size_t meta = 0, inner = 0, total = 0;
};

WorkspaceLayout workspace_layout(const Geometry& g, const Capacity& c, std::size_t inner_bytes) {
  WorkspaceLayout w;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at += align_up(bytes);
    return here;
  };
  const std::size_t lse_elem = g.global.return_lse ? 4 : 0;
  if (g.U > 1) {
    const std::size_t in_section = g.in_elem * (c.tok_q * g.hq * g.dqk + c.tok_k * g.hkv * (g.dqk + g.dv));
    const std::size_t out_section = c.tok_q * g.hq * (g.dv * g.out_elem + lse_elem);
    w.a2a_bytes = g.U * std::max(in_section, out_section);
    w.send = take(w.a2a_bytes);
    w.recv = take(w.a2a_bytes);
    if (g.text > 0) {
      w.text_section = static_cast<std::size_t>(g.B) * g.text * g.hq * (g.dv * g.out_elem + lse_elem);
      w.text_send = take(w.text_section);
      w.text_recv = take(g.U * w.text_section);
    }
  }
  w.q = take(c.q_rows * g.hq * g.dqk * g.in_elem);
  const std::size_t block = c.kv_rows * g.hkv * (g.dqk + g.dv) * g.in_elem;
  w.kv[0] = take(block);
  w.kv[1] = g.R > 1 ? take(block) : w.kv[0];
  if (g.text_apart) w.text_kv = take(c.text_rows * g.hkv * (g.dqk + g.dv) * g.in_elem);
  w.result = take(c.q_rows * g.hq * g.dv * dtype_size(g.result_dtype));
  if (g.result_lse) w.result_lse = take(c.q_rows * g.hq * 4);
  if (g.merged) {
    w.partial = take(c.q_rows * g.hq * g.dv * dtype_size(g.partial_dtype));
    w.partial_lse = take(c.q_rows * g.hq * 4);
  }
  if (!g.dense && g.device.kind == DeviceKind::cuda) w.meta = take(c.meta_ints * sizeof(std::int32_t));
  w.inner = take(inner_bytes);
  w.total = at + kAlign;  // room to align the caller's base pointer
  return w;
}

class UspPlan final : public SequenceParallelPlan {
 public:
  UspPlan(Geometry g, std::shared_ptr<Communicator> world, std::shared_ptr<Communicator> ring,
          std::shared_ptr<Communicator> ulysses, const DeviceOps* ops, std::optional<RunLayout> dense_layout,
          std::map<std::tuple<int, int, int>, std::unique_ptr<Plan>> inner, Capacity capacity)
      : SequenceParallelPlan(g.global), g_(std::move(g)), world_(std::move(world)), ring_(std::move(ring)),
        ulysses_(std::move(ulysses)), ops_(ops), dense_layout_(std::move(dense_layout)), inner_(std::move(inner)),
        capacity_(capacity) {
    std::size_t inner_bytes = 0;
    for (const auto& [key, plan] : inner_) inner_bytes = std::max(inner_bytes, plan->workspace_bytes());
    ws_ = workspace_layout(g_, capacity_, inner_bytes);
  }

  const SequenceParallel& parallel() const override { return g_.sp; }
  SequenceParallelStats last_run_stats() const override { return stats_; }
  std::size_t workspace_bytes() const override { return ws_.total; }

  Diagnostics run(const AttentionTensors& t, Workspace ws, StreamHandle stream) const override {
    stats_ = {};
    Result<const RunLayout*> layout = local_checks(t, ws);
    Diagnostics agreed = agree(*world_, layout ? Diagnostics{} : layout.diagnostics(),
                               layout ? (*layout)->fingerprint : 0);
    if (!agreed.ok()) return agreed;
    const RunLayout& L = **layout;
    auto addr = reinterpret_cast<std::uintptr_t>(ws.data());
    base_ = reinterpret_cast<std::byte*>((addr + kAlign - 1) / kAlign * kAlign);
    if (!g_.dense && g_.device.kind == DeviceKind::cuda)
      if (Diagnostics why = ops_->copy_bytes(base_ + ws_.meta, L.meta.data(), L.meta.size() * 4, stream); !why.ok())
        return why;
    for (auto step : {&UspPlan::scatter, &UspPlan::ring_hops, &UspPlan::finish, &UspPlan::gather})
      if (Diagnostics why = (this->*step)(L, t, stream); !why.ok()) return why;
    return {};
  }

 private:
  // ---- checks ---------------------------------------------------------------
  Result<const RunLayout*> local_checks(const AttentionTensors& t, Workspace ws) const {
    if (ws.size() < workspace_bytes() || (ws.data() == nullptr && workspace_bytes() > 0))
      return diagnose("AK1110", {{"given", std::to_string(ws.size())}, {"needed", std::to_string(workspace_bytes())}});
    const RunLayout* L = g_.dense ? &*dense_layout_ : nullptr;
    if (!g_.dense) {
      Diagnostics why;
      std::vector<int> q_lens, k_lens;
      for (const auto& [cu, lens, name] : {std::tuple{&t.cu_seqlens_q, &q_lens, "cu_seqlens_q"},
                                           std::tuple{&t.cu_seqlens_k, &k_lens, "cu_seqlens_k"}}) {
        if (cu->data == nullptr || cu->rank != 1 || cu->shape[0] != g_.B + 1 || cu->dtype != DType::i32 ||
            cu->device.kind == DeviceKind::cuda) {
          why.add("AK1108", {{"name", name}, {"reason", "a sequence-parallel plan reads the global lengths on the host: "
                                                        "int32 [batch + 1] in host memory, the same on every rank"}});
          continue;
        }
        const auto* c = cu->ptr<const std::int32_t>();
        for (int b = 0; b < g_.B; ++b) {
          const int len = c[(b + 1) * cu->strides[0]] - c[b * cu->strides[0]];
          if (len < 0 || len > (lens == &q_lens ? g_.global.seqlen_q : g_.global.seqlen_k))
            why.add("AK1108", {{"name", name}, {"reason", "sequence " + std::to_string(b) + " is " + std::to_string(len) +
                                                              " long, outside [0, the planned longest sequence]"}});
          lens->push_back(len);
        }
      }
      if (!why.ok()) return why;
      if (g_.R > 1 && g_.global.mask != MaskKind::none)
        for (int b = 0; b < g_.B; ++b)
          if (q_lens[b] != k_lens[b])
            return diagnose("AK5008", {{"what", "ring attention with a " + std::string(mask_kind_name(g_.global.mask)) +
                                                    " mask and sequence " + std::to_string(b) + " of " +
                                                    std::to_string(q_lens[b]) + " queries over " +
                                                    std::to_string(k_lens[b]) + " keys"},
                                       {"reason", "the shards' diagonals are those of self-attention"}});
      run_layout_ = build_layout(g_, std::move(q_lens), std::move(k_lens));
      L = &*run_layout_;
    }
    // The shard against this rank's local problem (THD: with its local packing).
    Problem local = L->sharding->local_problem(g_.rank);
    local.diagonal_offsets = false;
    AttentionTensors bound = t;
    TensorView cu_q, cu_k;
    if (!g_.dense) {
      // Computed here, so only their shape is checked (a device-kind view is not read).
      cu_q = make_tensor(L->local_cu_q.data(), DType::i32, g_.device, {g_.B + 1}, {1});
      cu_k = make_tensor(L->local_cu_k.data(), DType::i32, g_.device, {g_.B + 1}, {1});
      bound.cu_seqlens_q = cu_q;
      bound.cu_seqlens_k = cu_k;
    }
    Diagnostics why = validate_binding(local, bound, {g_.device.kind, 0});
    if (!why.ok()) return why;
    return L;
  }

  // ---- buffers --------------------------------------------------------------
  std::byte* at(std::size_t offset) const { return base_ + offset; }
  std::int64_t q_row() const { return static_cast<std::int64_t>(g_.hq) * g_.dqk; }
  std::int64_t kv_k_row() const { return static_cast<std::int64_t>(g_.hkv) * g_.dqk; }
  std::int64_t kv_v_row() const { return static_cast<std::int64_t>(g_.hkv) * g_.dv; }
  std::int64_t out_row() const { return static_cast<std::int64_t>(g_.hq) * g_.dv; }
  // K then V of a block of `rows` rows.
  std::byte* block_k(int i) const { return at(ws_.kv[i]); }
  std::byte* block_v(int i, std::int64_t rows) const { return at(ws_.kv[i]) + rows * kv_k_row() * g_.in_elem; }
  std::size_t block_bytes(std::int64_t rows) const { return rows * (kv_k_row() + kv_v_row()) * g_.in_elem; }

  Diagnostics copy(const RowCopy& c, const std::vector<RowRun>& runs, StreamHandle stream) const {
    return runs.empty() ? Diagnostics{} : ops_->copy_rows(c, runs, stream);
  }

  // A RowCopy from a user tensor's rows (heads [h0, h0 + heads)) into a buffer
  // of rows [heads, dim], or back (to_user).
  RowCopy user_copy(const TensorView& user, const UserRows& u, int h0, int heads, int dim, void* buffer,
                    DType buffer_dtype, bool to_user) const {
    RowCopy c;
    const std::int64_t buf_row = static_cast<std::int64_t>(heads) * dim;
    if (to_user) {
      c = {buffer, buffer_dtype, buf_row, dim, user.bytes() + h0 * u.head * dtype_size(user.dtype), user.dtype, u.row, u.head, heads, dim};
    } else {
      c = {user.bytes() + h0 * u.head * dtype_size(user.dtype), user.dtype, u.row, u.head, buffer, buffer_dtype, buf_row, dim, heads, dim};
    }
    return c;
  }

  // ---- 2: user shard -> ring-local buffers ---------------------------------
  // The split token ranges of Ulysses member u of this group, in u's local
  // order, with their first local row (after the text).
  template <class F>
  void for_each_member_range(const RunLayout& L, int u, bool k_side, F&& f) const {
    const int member = g_.ring_rank * g_.U + u;
    std::int64_t packed = 0;  // token index over all sequences (the all-to-all section order)
    for (int b = 0; b < g_.B; ++b) {
      std::int64_t local = g_.text;
      for (const TokenRange& r : k_side ? L.sharding->k_tokens(member, b) : L.sharding->q_tokens(member, b)) {
        f(b, r, local, packed);
        local += r.length;
        packed += r.length;
      }
    }
  }

  // Input sections of the all-to-all: [q tokens x hq x dqk | k tokens x hkv x dqk | v ...].
  std::size_t in_section_bytes(std::int64_t nq, std::int64_t nk) const {
    return g_.in_elem * (nq * q_row() + nk * (kv_k_row() + kv_v_row()));
  }

  Diagnostics scatter(const RunLayout& L, const AttentionTensors& t, StreamHandle stream) const {
    const UserRows uq = user_rows(t.q, g_.global.layout, L.local_cu_q), uk = user_rows(t.k, g_.global.layout, L.local_cu_k),
                   uv = user_rows(t.v, g_.global.layout, L.local_cu_k);
    const BufferLayout& own = L.kv[g_.ring_rank];
    const std::int64_t own_rows = own.rows;
    std::byte* q_buf = at(ws_.q);
    Diagnostics why;
    // The text rows, this rank's heads, without communication.
    if (g_.text > 0) {
      std::vector<RowRun> q_runs, k_runs, v_runs;
      for (int b = 0; b < g_.B; ++b) {
        q_runs.push_back({uq.seq[b], L.q.text_row[b] * q_row(), g_.text});
        const std::int64_t dst = g_.text_apart ? static_cast<std::int64_t>(b) * g_.text : own.text_row[b];
        k_runs.push_back({uk.seq[b], dst * kv_k_row(), g_.text});
        v_runs.push_back({uv.seq[b], dst * kv_v_row(), g_.text});
      }
      const int h0q = g_.uly_rank * g_.hq, h0k = g_.uly_rank * g_.hkv;
      std::byte* text_k = g_.text_apart ? at(ws_.text_kv) : block_k(0);
      const std::int64_t text_rows = g_.text_apart ? L.text.rows : own_rows;
      std::byte* text_v = text_k + text_rows * kv_k_row() * g_.in_elem;
      why.append(copy(user_copy(t.q, uq, h0q, g_.hq, g_.dqk, q_buf, g_.in, false), q_runs, stream));
      why.append(copy(user_copy(t.k, uk, h0k, g_.hkv, g_.dqk, text_k, g_.in, false), k_runs, stream));
      why.append(copy(user_copy(t.v, uv, h0k, g_.hkv, g_.dv, text_v, g_.in, false), v_runs, stream));
      if (!why.ok()) return why;
    }
    if (g_.U == 1) {
      // My split tokens are my ring chunk: straight into the buffers.
      std::vector<RowRun> q_runs, k_runs, v_runs;
      for_each_member_range(L, 0, false, [&](int b, TokenRange r, std::int64_t local, std::int64_t) {
        map_range(L.q, b, r, [&](std::int64_t row, std::int64_t off, std::int64_t n) {
          q_runs.push_back({uq.seq[b] + (local + off) * uq.row, row * q_row(), n});
        });
      });
      for_each_member_range(L, 0, true, [&](int b, TokenRange r, std::int64_t local, std::int64_t) {
        map_range(own, b, r, [&](std::int64_t row, std::int64_t off, std::int64_t n) {
          k_runs.push_back({uk.seq[b] + (local + off) * uk.row, row * kv_k_row(), n});
          v_runs.push_back({uv.seq[b] + (local + off) * uv.row, row * kv_v_row(), n});
        });
      });
      why.append(copy(user_copy(t.q, uq, 0, g_.hq, g_.dqk, q_buf, g_.in, false), q_runs, stream));
      why.append(copy(user_copy(t.k, uk, 0, g_.hkv, g_.dqk, block_k(0), g_.in, false), k_runs, stream));
      why.append(copy(user_copy(t.v, uv, 0, g_.hkv, g_.dv, block_v(0, own_rows), g_.in, false), v_runs, stream));
      return why;
    }
    // Ulysses: section u of the send buffer holds my tokens for u's heads.
    const std::int64_t my_q = L.member_q[g_.uly_rank], my_k = L.member_k[g_.uly_rank];
    std::vector<std::size_t> send_bytes(g_.U), recv_bytes(g_.U);
    std::size_t send_at = 0;
    for (int u = 0; u < g_.U; ++u) {
      std::byte* section = at(ws_.send) + send_at;
      std::byte* k_part = section + my_q * q_row() * g_.in_elem;
      std::byte* v_part = k_part + my_k * kv_k_row() * g_.in_elem;
      std::vector<RowRun> q_runs, k_runs, v_runs;
      for_each_member_range(L, g_.uly_rank, false, [&](int b, TokenRange r, std::int64_t local, std::int64_t packed) {
        q_runs.push_back({uq.seq[b] + local * uq.row, packed * q_row(), r.length});
      });
      for_each_member_range(L, g_.uly_rank, true, [&](int b, TokenRange r, std::int64_t local, std::int64_t packed) {
        k_runs.push_back({uk.seq[b] + local * uk.row, packed * kv_k_row(), r.length});
        v_runs.push_back({uv.seq[b] + local * uv.row, packed * kv_v_row(), r.length});
      });
      why.append(copy(user_copy(t.q, uq, u * g_.hq, g_.hq, g_.dqk, section, g_.in, false), q_runs, stream));
      why.append(copy(user_copy(t.k, uk, u * g_.hkv, g_.hkv, g_.dqk, k_part, g_.in, false), k_runs, stream));
      why.append(copy(user_copy(t.v, uv, u * g_.hkv, g_.hkv, g_.dv, v_part, g_.in, false), v_runs, stream));
      send_bytes[u] = in_section_bytes(my_q, my_k);
      recv_bytes[u] = in_section_bytes(L.member_q[u], L.member_k[u]);
      send_at += send_bytes[u];
    }
    if (!why.ok()) return why;
    why = timed(stats_.blocked_ms, [&] { return ulysses_->all_to_all(at(ws_.send), send_bytes, at(ws_.recv), recv_bytes, stream); });
    if (!why.ok()) return why;
    // Section u: member u's tokens for my heads -> their rows of my ring chunk.
    std::size_t recv_at = 0;
    for (int u = 0; u < g_.U; ++u) {
      std::byte* section = at(ws_.recv) + recv_at;
      std::byte* k_part = section + L.member_q[u] * q_row() * g_.in_elem;
      std::byte* v_part = k_part + L.member_k[u] * kv_k_row() * g_.in_elem;
      std::vector<RowRun> q_runs, k_runs, v_runs;
      for_each_member_range(L, u, false, [&](int b, TokenRange r, std::int64_t, std::int64_t packed) {
        map_range(L.q, b, r, [&](std::int64_t row, std::int64_t off, std::int64_t n) {
          q_runs.push_back({(packed + off) * q_row(), row * q_row(), n});
        });
      });
      for_each_member_range(L, u, true, [&](int b, TokenRange r, std::int64_t, std::int64_t packed) {
        map_range(own, b, r, [&](std::int64_t row, std::int64_t off, std::int64_t n) {
          k_runs.push_back({(packed + off) * kv_k_row(), row * kv_k_row(), n});
          v_runs.push_back({(packed + off) * kv_v_row(), row * kv_v_row(), n});
        });
      });
      why.append(copy({section, g_.in, q_row(), g_.dqk, q_buf, g_.in, q_row(), g_.dqk, g_.hq, g_.dqk}, q_runs, stream));
      why.append(copy({k_part, g_.in, kv_k_row(), g_.dqk, block_k(0), g_.in, kv_k_row(), g_.dqk, g_.hkv, g_.dqk}, k_runs, stream));
      why.append(copy({v_part, g_.in, kv_v_row(), g_.dv, block_v(0, own_rows), g_.in, kv_v_row(), g_.dv, g_.hkv, g_.dv},
                      v_runs, stream));
      recv_at += recv_bytes[u];
    }
    return why;
  }

  // ---- 3: the ring ------------------------------------------------------------
  // A bshd view of a uniform segment, a thd view otherwise.
  TensorView segment_view(std::byte* buffer, const SegmentRows& s, int heads, int dim, DType dtype) const {
    const std::int64_t row = static_cast<std::int64_t>(heads) * dim;
    std::byte* base = buffer + s.first_row * row * dtype_size(dtype);
    if (g_.dense) return make_tensor(base, dtype, g_.device, {g_.B, s.max_len, heads, dim}, {s.max_len * row, row, dim, 1});
    return make_tensor(base, dtype, g_.device, {s.rows, heads, dim}, {row, dim, 1});
  }
  // LSE of a segment stored [heads, row_stride] from `first` on.
  TensorView lse_view(float* lse, const SegmentRows& s, std::int64_t first, std::int64_t head_stride) const {
    if (g_.dense) return make_tensor(lse + first, DType::f32, g_.device, {g_.B, g_.hq, s.max_len}, {s.max_len, head_stride, 1});
    return make_tensor(lse + first, DType::f32, g_.device, {g_.hq, s.rows}, {head_stride, 1});
  }
  TensorView cu_view(const SegmentRows& s) const {
    if (g_.device.kind == DeviceKind::cuda)
      return make_tensor(at(ws_.meta) + s.meta * 4, DType::i32, g_.device, {g_.B + 1}, {1});
    return make_tensor(s.cu.data(), DType::i32, {}, {g_.B + 1}, {1});
  }

  const Plan& inner_plan(const SegmentRows& q, const SegmentRows& k, HopMask mask) const {
    return *inner_.at(g_.dense ? std::tuple{q.max_len, k.max_len, static_cast<int>(mask)}
                               : std::tuple{0, 0, static_cast<int>(mask)});
  }

  // One attention call: queries of segment qs against keys of ks (rows `k_rows`
  // of the buffer at `k_buf`), into the result (unmerged) or the partial buffers.
  Diagnostics call(const RunLayout& L, const AttentionTensors& user, const SegmentRows& qs, const SegmentRows& ks,
                   std::byte* k_buf, std::int64_t k_rows, HopMask mask, StreamHandle stream) const {
    if (qs.rows == 0 || ks.rows == 0) {
      ++stats_.skipped_calls;  // a segment of empty (all-padding) chunks
      return {};
    }
    const bool shifted = mask == HopMask::window && g_.R > 1;
    if (shifted) {
      bool any = false;
      diagonals_.assign(g_.B, 0);
      for (int b = 0; b < g_.B; ++b) {
        any = any || window_reaches(qs, ks, b, g_.global.window);
        diagonals_[b] = static_cast<std::int32_t>(qs.pos[b] - ks.pos[b]);  // query i at qpos + i sees key i + diag
      }
      if (!any) {
        ++stats_.skipped_calls;
        return {};
      }
    }
    ++stats_.calls;
    AttentionTensors t;
    t.q = segment_view(at(ws_.q), qs, g_.hq, g_.dqk, g_.in);
    t.k = segment_view(k_buf, ks, g_.hkv, g_.dqk, g_.in);
    t.v = segment_view(k_buf + k_rows * kv_k_row() * g_.in_elem, ks, g_.hkv, g_.dv, g_.in);
    if (g_.merged) {
      SegmentRows at0 = qs;  // the partial buffer holds this segment from row 0
      at0.first_row = 0;
      t.out = segment_view(at(ws_.partial), at0, g_.hq, g_.dv, g_.partial_dtype);
      t.lse = lse_view(reinterpret_cast<float*>(at(ws_.partial_lse)), qs, 0, qs.rows);
    } else {
      t.out = segment_view(at(ws_.result), qs, g_.hq, g_.dv, g_.result_dtype);
      if (g_.result_lse) t.lse = lse_view(reinterpret_cast<float*>(at(ws_.result_lse)), qs, qs.first_row, L.q.rows);
      if (g_.global.has_sinks) {
        t.sinks = user.sinks;
        t.sinks.data = user.sinks.ptr<float>() + g_.uly_rank * g_.hq * user.sinks.strides[0];
        t.sinks.shape[0] = g_.hq;
      }
    }
    if (!g_.dense) {
      t.cu_seqlens_q = cu_view(qs);
      t.cu_seqlens_k = cu_view(ks);
    }
    if (shifted) t.diagonal_offsets = make_tensor(diagonals_.data(), DType::i32, {}, {g_.B}, {1});
    const Plan& plan = inner_plan(qs, ks, mask);
    Diagnostics why = timed(stats_.inner_ms, [&] { return plan.run(t, {at(ws_.inner), plan.workspace_bytes()}, stream); });
    if (!why.ok() || !g_.merged) return why;
    MergeRows m;
    m.acc_out = reinterpret_cast<float*>(at(ws_.result)) + qs.first_row * out_row();
    m.acc_row_stride = out_row();
    m.acc_head_stride = g_.dv;
    m.acc_lse = reinterpret_cast<float*>(at(ws_.result_lse)) + qs.first_row;
    m.acc_lse_row_stride = 1;
    m.acc_lse_head_stride = L.q.rows;
    m.part_out = at(ws_.partial);
    m.part_dtype = g_.partial_dtype;
    m.part_row_stride = out_row();
    m.part_head_stride = g_.dv;
    m.part_lse = reinterpret_cast<const float*>(at(ws_.partial_lse));
    m.part_lse_row_stride = 1;
    m.part_lse_head_stride = qs.rows;
    m.rows = qs.rows;
    m.heads = g_.hq;
    m.dim = g_.dv;
    return ops_->merge(m, stream);
  }

  Diagnostics ring_hops(const RunLayout& L, const AttentionTensors& t, StreamHandle stream) const {
    if (g_.merged) {
      Diagnostics why = ops_->fill(reinterpret_cast<float*>(at(ws_.result)), L.q.rows * out_row(), 0.0f, stream);
      if (why.ok()) why = ops_->fill(reinterpret_cast<float*>(at(ws_.result_lse)), L.q.rows * g_.hq, -INFINITY, stream);
      if (!why.ok()) return why;
    }
    const int next = (g_.ring_rank + 1) % g_.R, prev = (g_.ring_rank + g_.R - 1) % g_.R;
    for (int hop = 0; hop < g_.R; ++hop) {
      ++stats_.hops;
      const int source = ring_source(g_.ring_rank, hop, g_.R), cur = hop % 2;
      const BufferLayout& block = L.kv[source];
      std::optional<Transfer> transfer;
      if (hop + 1 < g_.R) {
        // Double buffering: the next block arrives in the other buffer while this one is computed.
        const BufferLayout& incoming = L.kv[ring_source(g_.ring_rank, hop + 1, g_.R)];
        auto started = ring_->start_exchange(block_k(cur), block_bytes(block.rows), next, block_k(1 - cur),
                                             block_bytes(incoming.rows), prev, stream);
        if (!started) return started.diagnostics();
        transfer = *started;
      }
      for (const HopCall& c : ring_hop_calls(g_.ring_rank, source, g_.zigzag, g_.global.mask, g_.text_apart)) {
        const bool text = c.k == Segment::text;
        Diagnostics why = call(L, t, L.q.segment(c.q), text ? L.text : block.segment(c.k),
                               text ? at(ws_.text_kv) : block_k(cur), text ? L.text.rows : block.rows, c.mask, stream);
        if (!why.ok()) return why;
      }
      if (transfer)
        if (Diagnostics why = timed(stats_.blocked_ms, [&] { return ring_->wait(*transfer, stream); }); !why.ok()) return why;
    }
    return {};
  }

  // Sinks join the denominator once, after every hop: a partial of zeros whose LSE is the sink.
  Diagnostics finish(const RunLayout& L, const AttentionTensors& t, StreamHandle stream) const {
    if (!g_.merged || !g_.global.has_sinks) return {};
    MergeRows m;
    m.acc_out = reinterpret_cast<float*>(at(ws_.result));
    m.acc_row_stride = out_row();
    m.acc_head_stride = g_.dv;
    m.acc_lse = reinterpret_cast<float*>(at(ws_.result_lse));
    m.acc_lse_row_stride = 1;
    m.acc_lse_head_stride = L.q.rows;
    m.part_lse = t.sinks.ptr<const float>() + g_.uly_rank * g_.hq * t.sinks.strides[0];
    m.part_lse_head_stride = t.sinks.strides[0];
    m.rows = L.q.rows;
    m.heads = g_.hq;
    m.dim = g_.dv;
    return ops_->merge(m, stream);
  }

  // ---- 4: result -> user rows -----------------------------------------------
  std::size_t out_section_bytes(std::int64_t tokens) const {
    return tokens * g_.hq * (g_.dv * g_.out_elem + (g_.global.return_lse ? 4 : 0));
  }

  Diagnostics gather(const RunLayout& L, const AttentionTensors& t, StreamHandle stream) const {
    const UserRows uo = user_rows(t.out, g_.global.layout, L.local_cu_q);
    const bool lse = g_.global.return_lse;
    const UserRows ul = lse ? user_lse_rows(t.lse, g_.global.layout, L.local_cu_q) : UserRows{};
    const std::byte* result = at(ws_.result);
    const float* result_lse = reinterpret_cast<const float*>(at(ws_.result_lse));
    const std::int64_t lse_head = L.q.rows;  // the result LSE is [hq, q rows]
    const RowCopy out_from = {result, g_.result_dtype, out_row(), g_.dv, nullptr, g_.out, 0, 0, g_.hq, g_.dv};
    const RowCopy lse_from = {result_lse, DType::f32, 1, lse_head, nullptr, DType::f32, 0, 0, g_.hq, 1};
    Diagnostics why;
    if (g_.U == 1) {
      std::vector<RowRun> out_runs, lse_runs;
      for (int b = 0; b < g_.B && g_.text > 0; ++b) {
        out_runs.push_back({L.q.text_row[b] * out_row(), uo.seq[b], g_.text});
        if (lse) lse_runs.push_back({L.q.text_row[b], ul.seq[b], g_.text});
      }
      for_each_member_range(L, 0, false, [&](int b, TokenRange r, std::int64_t local, std::int64_t) {
        map_range(L.q, b, r, [&](std::int64_t row, std::int64_t off, std::int64_t n) {
          out_runs.push_back({row * out_row(), uo.seq[b] + (local + off) * uo.row, n});
          if (lse) lse_runs.push_back({row, ul.seq[b] + (local + off) * ul.row, n});
        });
      });
      RowCopy oc = out_from, lc = lse_from;
      std::tie(oc.dst, oc.dst_row_stride, oc.dst_head_stride) = std::tuple{t.out.data, uo.row, uo.head};
      why.append(copy(oc, out_runs, stream));
      if (lse) {
        std::tie(lc.dst, lc.dst_row_stride, lc.dst_head_stride) = std::tuple{t.lse.data, ul.row, ul.head};
        why.append(copy(lc, lse_runs, stream));
      }
      return why;
    }
    // Ulysses: section u of the send buffer holds u's tokens for my heads.
    const std::int64_t my_q = L.member_q[g_.uly_rank];
    std::vector<std::size_t> send_bytes(g_.U), recv_bytes(g_.U);
    std::size_t send_at = 0;
    for (int u = 0; u < g_.U; ++u) {
      std::byte* section = at(ws_.send) + send_at;
      float* lse_part = reinterpret_cast<float*>(section + L.member_q[u] * out_row() * g_.out_elem);
      std::vector<RowRun> out_runs, lse_runs;
      for_each_member_range(L, u, false, [&](int b, TokenRange r, std::int64_t, std::int64_t packed) {
        map_range(L.q, b, r, [&](std::int64_t row, std::int64_t off, std::int64_t n) {
          out_runs.push_back({row * out_row(), (packed + off) * out_row(), n});
          lse_runs.push_back({row, (packed + off) * g_.hq, n});
        });
      });
      RowCopy oc = out_from, lc = lse_from;
      std::tie(oc.dst, oc.dst_row_stride, oc.dst_head_stride) = std::tuple{section, out_row(), g_.dv};
      std::tie(lc.dst, lc.dst_row_stride, lc.dst_head_stride) = std::tuple{lse_part, g_.hq, 1};
      why.append(copy(oc, out_runs, stream));
      if (lse) why.append(copy(lc, lse_runs, stream));
      send_bytes[u] = out_section_bytes(L.member_q[u]);
      recv_bytes[u] = out_section_bytes(my_q);
      send_at += send_bytes[u];
    }
    why.append(gather_text(L, t, uo, ul, stream));
    if (!why.ok()) return why;
    why = timed(stats_.blocked_ms, [&] { return ulysses_->all_to_all(at(ws_.send), send_bytes, at(ws_.recv), recv_bytes, stream); });
    if (!why.ok()) return why;
    // Section u: my tokens for u's heads -> my out rows, heads of u.
    std::vector<RowRun> out_runs, lse_runs;
    for_each_member_range(L, g_.uly_rank, false, [&](int b, TokenRange r, std::int64_t local, std::int64_t packed) {
      out_runs.push_back({packed * out_row(), uo.seq[b] + local * uo.row, r.length});
      lse_runs.push_back({packed * g_.hq, ul.seq.empty() ? 0 : ul.seq[b] + local * ul.row, r.length});
    });
    std::size_t recv_at = 0;
    for (int u = 0; u < g_.U; ++u) {
      std::byte* section = at(ws_.recv) + recv_at;
      const RowCopy oc{section, g_.out, out_row(), g_.dv, t.out.bytes() + u * g_.hq * uo.head * g_.out_elem, g_.out,
                       uo.row, uo.head, g_.hq, g_.dv};
      why.append(copy(oc, out_runs, stream));
      if (lse) {
        const RowCopy lc{section + my_q * out_row() * g_.out_elem, DType::f32, g_.hq, 1,
                         t.lse.ptr<float>() + u * g_.hq * ul.head, DType::f32, ul.row, ul.head, g_.hq, 1};
        why.append(copy(lc, lse_runs, stream));
      }
      recv_at += recv_bytes[u];
    }
    return why;
  }

  // Joint attention under Ulysses: every member computed the text rows for its
  // heads; an all-gather gives every rank the text rows of all heads.
  Diagnostics gather_text(const RunLayout& L, const AttentionTensors& t, const UserRows& uo, const UserRows& ul,
                          StreamHandle stream) const {
    if (g_.text == 0) return {};
    const bool lse = g_.global.return_lse;
    const std::int64_t rows = static_cast<std::int64_t>(g_.B) * g_.text;
    std::byte* send = at(ws_.text_send);
    float* send_lse = reinterpret_cast<float*>(send + rows * out_row() * g_.out_elem);
    std::vector<RowRun> out_runs, lse_runs;
    for (int b = 0; b < g_.B; ++b) {
      out_runs.push_back({L.q.text_row[b] * out_row(), b * g_.text * out_row(), g_.text});
      lse_runs.push_back({L.q.text_row[b], b * g_.text * g_.hq, g_.text});
    }
    Diagnostics why = copy({at(ws_.result), g_.result_dtype, out_row(), g_.dv, send, g_.out, out_row(), g_.dv, g_.hq, g_.dv},
                           out_runs, stream);
    if (lse)
      why.append(copy({at(ws_.result_lse), DType::f32, 1, L.q.rows, send_lse, DType::f32, g_.hq, 1, g_.hq, 1}, lse_runs,
                      stream));
    if (!why.ok()) return why;
    why = timed(stats_.blocked_ms, [&] { return ulysses_->all_gather(send, ws_.text_section, at(ws_.text_recv), stream); });
    if (!why.ok()) return why;
    for (int u = 0; u < g_.U; ++u) {
      std::byte* section = at(ws_.text_recv) + u * ws_.text_section;
      std::vector<RowRun> o, l;
      for (int b = 0; b < g_.B; ++b) {
        o.push_back({b * g_.text * out_row(), uo.seq[b], g_.text});
        if (lse) l.push_back({b * g_.text * g_.hq, ul.seq[b], g_.text});
      }
      why.append(copy({section, g_.out, out_row(), g_.dv, t.out.bytes() + u * g_.hq * uo.head * g_.out_elem, g_.out, uo.row,
                       uo.head, g_.hq, g_.dv},
                      o, stream));
      if (lse)
        why.append(copy({section + rows * out_row() * g_.out_elem, DType::f32, g_.hq, 1,
                         t.lse.ptr<float>() + u * g_.hq * ul.head, DType::f32, ul.row, ul.head, g_.hq, 1},
                        l, stream));
    }
    return why;
  }

  Geometry g_;
  std::shared_ptr<Communicator> world_, ring_, ulysses_;
  const DeviceOps* ops_;
  std::optional<RunLayout> dense_layout_;
  std::map<std::tuple<int, int, int>, std::unique_ptr<Plan>> inner_;
  Capacity capacity_;
  WorkspaceLayout ws_;
  // Per-run state (a plan runs one call at a time).
  mutable std::optional<RunLayout> run_layout_;
  mutable std::vector<std::int32_t> diagonals_;
  mutable std::byte* base_ = nullptr;
  mutable SequenceParallelStats stats_;
};

// The inner problem of one hop call.
Problem inner_problem(const Geometry& g, HopMask mask, int sq, int sk) {
  Problem p = g.global;
  p.layout = g.dense ? Layout::bshd : Layout::thd;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = g.hq;
  p.heads_kv = g.hkv;
  p.scale = g.global.softmax_scale();
  p.mask = mask == HopMask::causal ? MaskKind::causal : mask == HopMask::window ? MaskKind::sliding_window : MaskKind::none;
  p.diagonal_offsets = mask == HopMask::window && g.R > 1;
  p.return_lse = g.result_lse;
  p.has_sinks = g.global.has_sinks && !g.merged;  // merged: the sinks join once, after the ring
  p.out_dtype_override = g.merged ? g.partial_dtype : g.result_dtype;
  return p;
}

}  // namespace

Result<std::unique_ptr<SequenceParallelPlan>> plan_sequence_parallel(const Problem& global, const SequenceParallel& sp,
                                                                     const Backend& inner, const Platform& platform) {
  std::shared_ptr<Communicator> world = platform.communicator;
  if (!world)
    return diagnose("AK5010", {{"kind", "a"}, {"reason", "the platform has no communicator (Platform::communicator)"}});
  // 1. What every rank decides alike, without communicating.
  Diagnostics why = validate_problem(global);
  why.append(check_sequence_parallel(global, sp, world->size()));
  const bool on_gpu = platform.kind == PlatformKind::cuda;
  if ((world->memory() == DeviceKind::cuda) != on_gpu)
    why.add("AK5010", {{"kind", std::string(world->kind())},
                       {"reason", std::string("its buffers live on the ") + (on_gpu ? "CPU" : "GPU") + " but the plan runs on " +
                                      platform.label()}});
  if (sp.ring_degree > 1 && !ring_capable(inner.capabilities()))
    why.add("AK5003", {{"backend", std::string(inner.name())}, {"layer", "this call"}, {"ring", std::to_string(sp.ring_degree)}});
  if (!why.ok()) return why;

  Geometry g;
  g.global = global;
  g.sp = sp;
  g.R = sp.ring_degree;
  g.U = sp.ulysses_degree;
  g.rank = world->rank();
  g.ring_rank = g.rank / g.U;
  g.uly_rank = g.rank % g.U;
  g.B = global.batch;
  g.hq = global.heads_q / g.U;
  g.hkv = global.heads_kv / g.U;
  g.dqk = global.head_dim_qk;
  g.dv = global.head_dim_v;
  g.text = sp.replicated_tokens;
  g.in = global.dtype;
  g.out = global.out_dtype();
  g.in_elem = dtype_size(g.in);
  g.out_elem = dtype_size(g.out);
  g.zigzag = uses_zigzag(global, sp);
  g.dense = global.layout != Layout::thd;
  g.text_apart = g.R > 1 && g.text > 0;
  g.merged = g.R > 1;
  g.result_dtype = g.merged ? DType::f32 : g.out;
  g.result_lse = g.merged || global.return_lse;
  g.device = {on_gpu ? DeviceKind::cuda : DeviceKind::cpu, platform.device_index};
  // Partials in fp32 where the inner backend writes fp32 outputs, else in the output dtype.
  if (g.merged) {
    g.partial_dtype = DType::f32;
    if (!inner.check(inner_problem(g, HopMask::none, 1, 1), platform).ok()) g.partial_dtype = g.out;
  }

  // 2. The inner plans of every call this rank will make.
  std::optional<RunLayout> dense_layout;
  std::map<std::tuple<int, int, int>, std::unique_ptr<Plan>> plans;
  auto add_plan = [&](HopMask mask, int sq, int sk, std::tuple<int, int, int> key) {
    if (plans.count(key) || !why.ok()) return;
    auto plan = inner.plan(inner_problem(g, mask, sq, sk), platform);
    if (!plan) {
      why.append(plan.diagnostics());
      return;
    }
    plans[key] = std::move(*plan);
  };
  if (g.dense) {
    dense_layout = build_layout(g, std::vector<int>(g.B, global.seqlen_q), std::vector<int>(g.B, global.seqlen_k));
    for (int hop = 0; hop < g.R; ++hop) {
      const int source = ring_source(g.ring_rank, hop, g.R);
      for (const HopCall& c : ring_hop_calls(g.ring_rank, source, g.zigzag, global.mask, g.text_apart)) {
        const SegmentRows& qs = dense_layout->q.segment(c.q);
        const SegmentRows& ks = c.k == Segment::text ? dense_layout->text : dense_layout->kv[source].segment(c.k);
        if (qs.rows > 0 && ks.rows > 0)
          add_plan(c.mask, qs.max_len, ks.max_len, {qs.max_len, ks.max_len, static_cast<int>(c.mask)});
      }
    }
  } else {
    for (HopMask m : {HopMask::none, HopMask::causal, HopMask::window})
      for (int hop = 0; hop < g.R; ++hop)
        for (const HopCall& c : ring_hop_calls(g.ring_rank, ring_source(g.ring_rank, hop, g.R), g.zigzag, global.mask, false))
          if (c.mask == m) add_plan(m, global.seqlen_q, global.seqlen_k, {0, 0, static_cast<int>(m)});
  }
  auto ops = ops_for(g.device.kind);
  if (!ops) why.append(ops.diagnostics());
  // 3. Agreed on by every rank, then the ring and Ulysses groups.
  why = agree(*world, why);
  if (!why.ok()) return why;
  std::shared_ptr<Communicator> ring = world, ulysses = world;
  if (g.R > 1 && g.U > 1) {
    auto r = world->split(g.uly_rank, g.ring_rank);
    if (!r) return r.diagnostics();
    auto u = world->split(g.ring_rank, g.uly_rank);
    if (!u) return u.diagnostics();
    ring = *r;
    ulysses = *u;
  }
  const Capacity capacity = capacity_of(g, dense_layout ? &*dense_layout : nullptr);
  return std::unique_ptr<SequenceParallelPlan>(std::make_unique<UspPlan>(
      std::move(g), world, ring, ulysses, *ops, std::move(dense_layout), std::move(plans), capacity));
}

}  // namespace attnkit::dist
