#pragma once
// Where tokens sit in the buffers of a sequence-parallel plan. After the
// Ulysses all-to-all (or directly, without Ulysses) a rank holds its ring
// chunk for its heads in "ring-local" buffers [rows, heads, dim]: rows grouped
// by segment (zigzag: first part, then second part; otherwise one whole
// segment), then by sequence. Every attention call of a hop reads one segment
// of the queries and one of a K/V block, as a padded (bshd) view when all
// sequences are equally long, as a packed (thd) view otherwise.
#include <cstdint>
#include <vector>

#include "attnkit/dist/sharding.hpp"
#include "dist/ring_schedule.hpp"

namespace attnkit::dist {

// One segment of a ring-local buffer: sequence b's rows are
// [first_row + cu[b], first_row + cu[b + 1]).
struct SegmentRows {
  std::int64_t first_row = 0;
  std::int64_t rows = 0;
  std::vector<std::int32_t> cu;  // prefix sums of the per-sequence lengths
  std::vector<std::int64_t> pos;  // split position of each sequence's first split token
  int max_len = 0;
  bool uniform = true;  // every sequence equally long: a bshd view
  std::int64_t meta = -1;  // where `cu` sits in the plan's device metadata (GPU, thd)
  int len(int b) const { return cu[b + 1] - cu[b]; }
};

// Split positions [pos, pos + len) of one sequence, stored from `row` on.
struct Piece {
  std::int64_t pos = 0;
  std::int64_t len = 0;
  std::int64_t row = 0;
};

struct BufferLayout {
  SegmentRows first, second, whole;
  std::int64_t rows = 0;
  std::vector<std::vector<Piece>> pieces;  // per sequence
  std::vector<std::int64_t> text_row;      // per sequence: its first text row here, -1 when the text is elsewhere
  const SegmentRows& segment(Segment s) const;
};

// The ring-local layout of ring rank `ring_rank`'s chunk of sequences with the
// given global lengths (`text` of each are replicated text tokens, kept at the
// front of each sequence when `with_text`).
BufferLayout ring_local_layout(const std::vector<int>& lens, int text, int ring_degree, int ring_rank, bool zigzag,
                               bool with_text);
// The replicated text rows of every sequence, apart ([batch * text] rows).
SegmentRows text_segment(int batch, int text);

// Calls f(row, offset, count) for the rows of `layout` holding split positions
// [r.start, r.start + r.length) of sequence b: offset counts from r.start.
template <class F>
void map_range(const BufferLayout& layout, int b, TokenRange r, F&& f) {
  for (const Piece& p : layout.pieces[b]) {
    const std::int64_t lo = r.start > p.pos ? r.start : p.pos;
    const std::int64_t hi = r.start + r.length < p.pos + p.len ? r.start + r.length : p.pos + p.len;
    if (hi > lo) f(p.row + (lo - p.pos), lo - r.start, hi - lo);
  }
}

// Whether a sliding window (left, right) over split positions lets any query of
// q see any key of k (both segments of sequence b): key - query offsets span
// [k0 - (q0 + nq - 1), k0 + nk - 1 - q0] and the window keeps [-left, right].
bool window_reaches(const SegmentRows& q, const SegmentRows& k, int b, Window w);

}  // namespace attnkit::dist
