#pragma once
// sparge_attn's per-call block selection (sparse/sparge.hpp, docs/sparse.md
// section 5) into CSR lists at the front of the plan's workspace: on the host
// (OpenMP over sparge_select, the CPU path) or on the GPU (the kernels of
// backends/cuda/sparge_select, the CUDA path). Laid out at plan time; select()
// allocates nothing.
#include <cstdint>
#include <memory>

#include "attnkit/backends/backend.hpp"
#include "attnkit/sparse/sparge.hpp"

namespace attnkit::sparse {

// The lists one call selected (int32 views into the workspace). Host lists
// are exact; device lists' indices view spans the capacity (rows x key
// blocks), of which offsets[rows] are used (the kernels clamp to the offsets).
struct SpargeLists {
  TensorView offsets, indices;
};

class SpargeSelection {
 public:
  virtual ~SpargeSelection() = default;
  // The block layout of the lists: 128-query x 64-key blocks, one list set per sequence and head.
  static BlockSparse layout(const Problem& p) {
    return {SpargeSettings::kBlockQ, SpargeSettings::kBlockK, p.batch, p.heads_q};
  }
  // Bytes of the workspace front the selection uses.
  virtual std::size_t bytes() const = 0;
  // The lists for the call's q and k (a binding already validated), written
  // into the front of `ws` (on `stream` for the GPU).
  virtual Result<SpargeLists> select(const AttentionTensors& t, Workspace ws, StreamHandle stream) const = 0;
  // The entries of `lists` (offsets[rows]); the GPU's copies the total back
  // and waits for `stream` (what asking for statistics costs there).
  virtual Result<std::int64_t> listed(const SpargeLists& lists, StreamHandle stream) const = 0;
};

// AK1012 when the lists could pass 2^31 - 1 entries (int32 offsets).
Result<std::unique_ptr<SpargeSelection>> make_host_sparge_selection(const Problem& p, const SpargeSettings& s);
// AK1012 also past more key blocks than one CTA's shared memory ranks (2^14
// on an H200: a million tokens); AK6002 without CUDA.
Result<std::unique_ptr<SpargeSelection>> make_device_sparge_selection(const Problem& p, const SpargeSettings& s,
                                                                      const Platform& gpu);

}  // namespace attnkit::sparse
