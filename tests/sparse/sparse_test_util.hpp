#pragma once
// Helpers of the sparse backend tests.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attnkit/backends/backend.hpp"
#include "attnkit/platform/platform.hpp"
#include "testing/parity_cases.hpp"
#include "testing/video_inputs.hpp"

namespace attnkit::testing {

// Writes `contents` to a file of this process's temporary directory; returns its path.
// Per process: ctest runs each test in its own process, in parallel, and two of
// them writing one shared path let one read the other's half-written file.
inline std::string temp_file(const std::string& name, const std::string& contents) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("attnkit_sparse_tests_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / name;
  std::ofstream(path) << contents;
  return path.string();
}

// A BSHD video self-attention problem: the grid's tokens, then `text` text tokens.
inline Problem video_problem(VideoGrid grid, int text, int batch, int heads_q, int heads_kv, int dim, DType dtype) {
  const int tokens = static_cast<int>(grid.tokens()) + text;
  Problem p = make_test_problem(tokens, tokens, heads_q, heads_kv, dim, dtype);
  p.batch = batch;
  p.video = grid;
  return p;
}

// Host data for `p` with video-like q / k / v (testing/video_inputs.hpp), seeded.
inline Result<HostProblemData> video_like_data(const Problem& p, std::uint64_t seed) {
  auto data = HostProblemData::create(p, {.seed = seed});
  if (data) fill_video_like(p, data->tensors(), {.seed = seed});
  return data;
}

// One call of `backend` planned under `config` on the CPU, run at `where` on
// `t`: its refusal (if any) and what it reported skipping.
struct SparseRun {
  Diagnostics ran;
  SparsityStats stats;
};
inline SparseRun run_on_cpu(const Backend& backend, const Problem& p, const select::BackendConfig& config,
                            CallContext where, const AttentionTensors& t) {
  SparseRun r;
  auto plan = backend.plan_configured(p, detect_cpu_platform(), config);
  if (!plan) {
    r.ran = plan.diagnostics();
    return r;
  }
  std::vector<std::byte> ws((*plan)->workspace_bytes());
  where.stats = &r.stats;
  r.ran = (*plan)->run_at(where, t, ws, nullptr);
  return r;
}

inline std::vector<double> as_doubles(const TensorView& t) {
  std::vector<double> v;
  for (std::int64_t e = 0; e < t.numel(); ++e) v.push_back(load_as_double(t.data, t.dtype, e));
  return v;
}

// A q-layout out (BSHD / BHSD) as [batch, seqlen_q, heads_q, head_dim_v] doubles.
inline std::vector<double> bshd_doubles(const Problem& p, const TensorView& out) {
  std::vector<double> v(static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads_q * p.head_dim_v);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const HeadRows r = head_rows(p.layout, out.strides.data(), b, h, 0);
      for (int i = 0; i < p.seqlen_q; ++i)
        for (int e = 0; e < p.head_dim_v; ++e)
          v[((static_cast<std::size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_v + e] =
              load_as_double(out.data, out.dtype, r.offset + i * r.row_stride + e);
    }
  return v;
}

inline double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return std::sqrt(d / n);
}

}  // namespace attnkit::testing
