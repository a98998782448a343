#include "testing/parity_cases.hpp"

namespace attnkit::testing {
Problem make_test_problem(int sq, int sk, int hq, int hkv, int d, DType dtype, MaskKind mask) {
  Problem p;
  p.batch = 2;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim_qk = p.head_dim_v = d;
  p.dtype = dtype;
  p.mask = mask;
  return p;
}

namespace {

Problem base(int sq, int sk, int hq, int hkv, int d, DType dtype) { return make_test_problem(sq, sk, hq, hkv, d, dtype); }

std::string dt(DType t) { return std::string(dtype_name(t)); }

// The rising_logits_* cases' ProblemDataOptions::key_growth: the logits' spread
// grows x5 from a row's first key to its last, which moves the running max of
// every row past lazy rescaling's 2^8 threshold after its first key tiles.
constexpr double kRisingKeyGrowth = 4.0;

}  // namespace

void add_case(std::vector<ParityCase>& list, std::string name, const Problem& p, ProblemDataOptions o,
              std::uint64_t seed_base) {
  o.seed = seed_base + list.size() * 7919;
  list.push_back({std::move(name), p, std::move(o)});
}

std::vector<ParityCase> parity_cases() {
  std::vector<ParityCase> cases;
  auto add = [&](std::string name, const Problem& p, ProblemDataOptions o = {}) {
    add_case(cases, std::move(name), p, std::move(o));
  };

  // Sequence lengths, each dtype, plain and causal.
  for (int s : {1, 17, 127, 1000})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool causal : {false, true}) {
        Problem p = base(s, s, 4, 2, 64, t);
        p.batch = s >= 1000 ? 1 : 2;
        if (causal) p.mask = MaskKind::causal;
        add("s" + std::to_string(s) + "_" + dt(t) + (causal ? "_causal" : ""), p);
      }
  // Head dims.
  for (int d : {32, 64, 72, 80, 96, 128, 192, 256})
    for (DType t : {DType::f32, DType::bf16}) {
      Problem p = base(77, 77, 2, 1, d, t);
      p.mask = d % 64 == 0 ? MaskKind::causal : MaskKind::none;
      add("d" + std::to_string(d) + "_" + dt(t), p);
    }
  // GQA ratios.
  for (int r : {1, 2, 4, 7, 8}) {
    Problem p = base(65, 65, 2 * r, 2, 64, DType::bf16);
    add("gqa" + std::to_string(r), p);
  }
  // Causal with sq != sk (bottom-right aligned), both directions, and decode.
  for (auto [sq, sk] : {std::pair{17, 127}, {127, 17}, {1, 1000}, {5, 300}})
    for (DType t : {DType::f32, DType::bf16}) {
      Problem p = base(sq, sk, 4, 1, 64, t);
      p.mask = MaskKind::causal;
      add("causal_q" + std::to_string(sq) + "_k" + std::to_string(sk) + "_" + dt(t), p);
    }
  // Sliding windows.
  for (auto [l, r] : {std::pair{32, 0}, {16, 16}, {-1, 8}, {0, 0}})
    for (DType t : {DType::f32, DType::bf16}) {
      Problem p = base(100, 150, 4, 2, 64, t);
      p.mask = MaskKind::sliding_window;
      p.window = {l, r};
      add("window_" + std::to_string(l + 1) + "_" + std::to_string(r + 1) + "_" + dt(t), p);
    }
  // Softcap, sinks, LSE.
  {
    Problem p = base(127, 127, 4, 2, 64, DType::f32);
    p.softcap = 5.0f;
    p.mask = MaskKind::causal;
    add("softcap_causal", p);
    p.dtype = DType::bf16;
    p.has_sinks = true;
    p.return_lse = true;
    add("softcap_sinks_lse_bf16", p);
    Problem q = base(33, 90, 8, 8, 128, DType::f32);
    q.has_sinks = true;
    q.return_lse = true;
    q.scale = 0.3f;
    add("sinks_lse_scale", q);
    q.mask = MaskKind::causal;  // q shorter than k: no fully masked rows
    q.seqlen_q = 90;
    q.seqlen_k = 33;            // q longer than k: the first rows see nothing
    add("lse_empty_rows", q);
    q.dtype = DType::bf16;      // the same for the half-precision kernels
    add("lse_empty_rows_sinks_bf16", q);
  }
  // Varlen, an empty sequence included.
  for (bool causal : {false, true})
    for (DType t : {DType::f32, DType::bf16}) {
      Problem p = base(60, 70, 4, 2, 64, t);
      p.layout = Layout::thd;
      p.batch = 4;
      p.return_lse = true;
      if (causal) p.mask = MaskKind::causal;
      ProblemDataOptions o;
      o.q_lens = {5, 0, 60, 17};
      o.k_lens = {9, 0, 70, 17};
      add(std::string("varlen") + (causal ? "_causal_" : "_") + dt(t), p, o);
    }
  // BHSD and a v head dim that differs from qk.
  {
    for (DType t : {DType::f32, DType::f16}) {
      Problem p = base(50, 80, 4, 2, 64, t);
      p.layout = Layout::bhsd;
      p.mask = MaskKind::causal;
      add("bhsd_causal_" + dt(t), p);
    }
    Problem q = base(40, 40, 2, 2, 192, DType::bf16);
    q.head_dim_v = 128;
    add("dqk192_dv128", q);
  }
  // Block-sparse lists with empty rows: shared and per sequence / head, GQA,
  // composed with causal and windows, varlen with an empty sequence, query
  // blocks below, across and above the CPU's 64-row tile, sq and sk not
  // multiples of the block sizes.
  {
    ProblemDataOptions o;
    o.mask_density = 0.5;
    o.empty_block_rows = 0.15;
    Problem p = base(150, 200, 2, 1, 64, DType::f32);
    p.block_sparse = BlockSparse{32, 64, 1, 1};
    p.return_lse = true;
    add("block_sparse", p, o);
    p.block_sparse = BlockSparse{32, 64, 2, 2};
    add("block_sparse_per_head", p, o);
    Problem g = base(200, 260, 8, 2, 64, DType::bf16);
    g.mask = MaskKind::causal;
    g.block_sparse = BlockSparse{128, 64, 1, 8};
    add("block_sparse_gqa_causal_bf16", g, o);
    Problem w = base(180, 180, 4, 4, 64, DType::f16);
    w.mask = MaskKind::sliding_window;
    w.window = {40, 10};
    w.block_sparse = BlockSparse{48, 16, 2, 1};
    add("block_sparse_window_fp16", w, o);
    Problem v = base(100, 120, 4, 2, 64, DType::f32);
    v.layout = Layout::thd;
    v.batch = 4;
    v.mask = MaskKind::causal;
    v.return_lse = true;
    v.block_sparse = BlockSparse{16, 32, 4, 4};
    ProblemDataOptions vo = o;
    vo.q_lens = {37, 0, 100, 64};
    vo.k_lens = {50, 0, 120, 64};
    add("block_sparse_varlen_causal", v, vo);
  }
  // Block sparsity at the sm_90 kernel's tiles (fa3's block-sparse instances:
  // head dim 128, blocks whole multiples of its 128 x 128 tiles, one or
  // several key tiles per listed block), odd lengths, empty rows, GQA,
  // composed with causal, varlen with an empty sequence; the other backends
  // run them too.
  {
    ProblemDataOptions o;
    o.mask_density = 0.4;
    o.empty_block_rows = 0.1;
    // Lists per head with the LSE; causal over two sequences sharing their lists.
    const auto per_head = [&](const char* name, BlockSparse layout, const ProblemDataOptions& opts) {
      Problem a = base(700, 900, 4, 2, 128, DType::bf16);
      a.block_sparse = layout;
      a.return_lse = true;
      add(name, a, opts);
    };
    const auto causal_pair = [&](const char* name, BlockSparse layout) {
      Problem c = base(640, 600, 4, 4, 128, DType::f16);
      c.batch = 2;
      c.mask = MaskKind::causal;
      c.block_sparse = layout;
      add(name, c, o);
    };
    per_head("block_sparse_d128_per_head_bf16", {128, 256, 1, 4}, o);
    causal_pair("block_sparse_d128_causal_fp16", {256, 128, 2, 1});
    Problem w = base(1152, 1152, 2, 1, 128, DType::bf16);
    w.block_sparse = BlockSparse{384, 384, 1, 1};  // 6x8x8 video tiles
    add("block_sparse_d128_tiles384_bf16", w, o);
    Problem v = base(500, 520, 2, 1, 128, DType::bf16);
    v.layout = Layout::thd;
    v.batch = 3;
    v.block_sparse = BlockSparse{128, 128, 3, 2};
    v.return_lse = true;
    ProblemDataOptions vo = o;
    vo.q_lens = {300, 0, 500};
    vo.k_lens = {260, 0, 520};
    add("block_sparse_d128_varlen_bf16", v, vo);
    // 64-key blocks (sparge_attn's): fa3's 64-key-tile instances (fa3bsk64), one or three tiles a block.
    per_head("block_sparse_d128_keys64_bf16", {128, 64, 1, 4}, o);
    causal_pair("block_sparse_d128_keys192_causal_fp16", {256, 192, 2, 1});
    // 64-query blocks (sol_attn's kept tiles, VSA's cubes): fa3's 64 x 64 tiles (fa3bsq64), two
    // CTAs an SM; one or two key tiles a block, causal, and packed sequences with an empty one.
    per_head("block_sparse_d128_q64_bf16", {64, 64, 1, 4}, o);
    causal_pair("block_sparse_d128_q64_keys128_causal_fp16", {64, 128, 2, 1});
    Problem v64 = v;
    v64.block_sparse = BlockSparse{64, 64, 3, 2};
    add("block_sparse_d128_q64_varlen_bf16", v64, vo);
    // Rising logits (below) on the lazily rescaled list tiles: 128-key (fa3bs) and 192-key (fa3bs192).
    ProblemDataOptions rising = o;
    rising.key_growth = kRisingKeyGrowth;
    per_head("rising_logits_block_sparse_d128_bf16", {128, 128, 1, 4}, rising);
    add("rising_logits_block_sparse_d128_tiles384_bf16", w, rising);
  }
  // Logits that keep rising along each row (keys scaled up with their
  // position): the running max moves well past its first key tiles, so the
  // instances with lazy rescaling (fa3 d128 and d256; the 128- and 192-key
  // block-sparse lists above) rescale O mid-row, deferred or not. With
  // normal keys the max settles in the first tile and those moves never run.
  {
    ProblemDataOptions o;
    o.key_growth = kRisingKeyGrowth;
    Problem full = base(200, 1100, 2, 1, 128, DType::bf16);  // full rows over nine key tiles
    full.return_lse = true;
    add("rising_logits_d128_bf16", full, o);
    Problem causal = base(600, 600, 2, 2, 128, DType::f16);
    causal.mask = MaskKind::causal;
    add("rising_logits_d128_causal_fp16", causal, o);
    Problem d256 = base(300, 700, 2, 1, 256, DType::bf16);
    d256.return_lse = true;
    add("rising_logits_d256_bf16", d256, o);
    add("rising_logits_d64_bf16", base(300, 1000, 4, 2, 64, DType::bf16), o);
  }
  // A custom mask.
  {
    Problem q = base(40, 50, 2, 1, 32, DType::f32);
    q.mask = MaskKind::custom;
    q.return_lse = true;
    add("custom_mask", q);
  }
  // Paged KV cache (decode and chunked prefill).
  {
    Problem p = base(1, 300, 8, 2, 128, DType::bf16);
    p.paged_kv = PagedKv{16};
    p.seqlen_k = 300;
    ProblemDataOptions o;
    o.k_lens = {300, 45};
    add("paged_decode", p, o);
    p.seqlen_q = 20;
    p.mask = MaskKind::causal;
    add("paged_prefill_causal", p, o);
  }
  return cases;
}

}  // namespace attnkit::testing
